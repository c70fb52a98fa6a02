"""The knowledge base's rows as typed, frozen values, and the lookups a KnowledgeBase answers itself.

Every row carries `source` and `checked` (its Provenance); facts listed in a row's `unconfirmed`
are surfaced as warnings by whoever uses them. docs/knowledge-base.md describes every table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cache, cached_property

from packaging.version import Version

from gpuenv.stack import PythonSource

_COMPUTE_CAPABILITY = re.compile(r"\d{1,2}\.\d")  # "8.0", in each arch list of each torch release


class SchemaError(ValueError):
    """A knowledge base file that does not hold what gpuenv needs (the message names the row and field)."""


COMPANIONS = ("torchvision", "torchaudio")  # the packages released with torch, paired to its releases


@dataclass(frozen=True)
class Provenance:
    source: str
    checked: str
    unconfirmed: tuple[str, ...] = ()


@dataclass(frozen=True)
class ArchList:
    """The GPU code in one (torch release, CUDA build): SASS (cubins) per compute capability, and PTX."""

    sass: tuple[str, ...]  # ("7.5", "8.0", ...)
    ptx: tuple[str, ...]  # ("12.0",): PTX the driver can JIT for newer devices

    @classmethod
    def parse(cls, text: str) -> ArchList:
        """From TORCH_CUDA_ARCH_LIST syntax: "7.5;8.0;12.0+PTX"."""
        items = [item.strip() for item in text.split(";") if item.strip()]
        if not items:
            raise SchemaError("an arch list names no compute capability")
        sass = tuple(item.removesuffix("+PTX") for item in items)
        for sm in sass:
            if not _COMPUTE_CAPABILITY.fullmatch(sm):
                raise SchemaError(f"arch list {text!r}: {sm!r} is not a compute capability")
        return cls(sass, tuple(item.removesuffix("+PTX") for item in items if item.endswith("+PTX")))

    def __str__(self) -> str:
        return ";".join(sm + ("+PTX" if sm in self.ptx else "") for sm in self.sass)

    def span(self) -> str:
        """Human-readable: "sm_75…sm_120 (+PTX 12.0)"."""
        text = f"sm_{_sm_digits(self.sass[0])}…sm_{_sm_digits(self.sass[-1])}"
        return text + (f" (+PTX {', '.join(self.ptx)})" if self.ptx else "")


@dataclass(frozen=True)
class TorchRelease:
    version: str
    torchvision: str | None
    torchaudio: str | None
    builds: tuple[str, ...]
    default_build: str
    python: tuple[str, ...]  # CPython minors with a Linux x86_64 wheel on PyPI
    provenance: Provenance
    arch: dict[str, ArchList] = field(default_factory=dict)  # per build
    python_experimental: tuple[str, ...] = ()  # wheels exist, but not for the trio: never picked
    released: str | None = None

    def build_confirmed(self, build: str) -> bool:
        """The release's build list is settled and nothing about this build is disputed."""
        disputed = ("builds", f"build:{build}", f"arch:{build}")
        return not any(u in disputed for u in self.provenance.unconfirmed)

    def published_as(self, on: TorchOnArch | None) -> TorchRelease:
        """The release as its wheels are for another CPU architecture: the builds published for it, their GPU
        code, the build of its plain PyPI wheel there (None: no GPU build is published for it)."""
        arch = dict(on.arch) if on else {}
        kept = tuple(u for u in self.provenance.unconfirmed if not _about_builds(u))
        source = f"{self.provenance.source}; {on.provenance.source}" if on else self.provenance.source
        unconfirmed = kept + (on.provenance.unconfirmed if on else ())
        # a build whose torchvision or torchaudio has no wheel there is not settled: never picked unasked
        unconfirmed += tuple(f"build:{b}" for b in (on.companions_missing if on else ()))
        return replace(
            self,
            builds=tuple(arch),
            arch=arch,
            default_build=on.plain_build if on else "cpu",
            provenance=Provenance(source, on.provenance.checked if on else self.provenance.checked, unconfirmed),
        )


@dataclass(frozen=True)
class TorchOnArch:
    """A torch release's wheels for a CPU architecture other than the torch rows' own (aarch64): the CUDA
    builds published for it with the GPU code of each, and the build PyPI's plain wheel is there ("cpu")."""

    torch: str
    cpu_arch: str
    arch: dict[str, ArchList]  # build -> its GPU code on this architecture; the keys are the builds
    plain_build: str
    provenance: Provenance
    companions_missing: dict[str, tuple[str, ...]] = field(default_factory=dict)  # build -> companions with no wheel


@dataclass(frozen=True)
class CudaOnArch:
    """Which nvidia/cuda images of a CUDA release are published for another CPU architecture."""

    cuda: str  # the CUDA row's version, "12.8"
    cpu_arch: str
    images: tuple[str, ...]  # OS names with base/runtime/devel images for this architecture
    cudnn_images: tuple[str, ...]  # OS names with cuDNN images for it
    provenance: Provenance


@dataclass(frozen=True)
class CudaRelease:
    version: str  # "11.7"
    build: str  # "cu117"
    toolkit: str  # "11.7.1"
    bundled_driver: str
    minor_compat_floor: str
    cudnn: str | None
    cudnn_tag: str  # "cudnn8" | "cudnn9" | "cudnn"
    images: tuple[str, ...]  # OS names with nvidia/cuda images
    eol: bool
    deleted_tags: tuple[str, ...]
    provenance: Provenance
    cudnn_images: tuple[str, ...] | None = None  # OS names with cuDNN images; None: every one of `images`
    # the driver branches older than its own on which NVIDIA's cuda-compat-X-Y package runs it ("R535"); None: not
    # recorded (a knowledge base written before forward compatibility), which serves no branch
    forward_compat: tuple[str, ...] | None = None

    @property
    def compat_package(self) -> str:
        """NVIDIA's forward-compatibility package of the release: cuda-compat-12-8."""
        return "cuda-compat-" + self.version.replace(".", "-")

    def names(self, cuda: str) -> bool:
        """Whether `cuda` names this release: its minor, toolkit or build, or another patch of its minor."""
        parts = cuda.split(".")
        patch_of_minor = len(parts) == 3 and all(p.isdigit() for p in parts) and ".".join(parts[:2]) == self.version
        return cuda in (self.version, self.toolkit, self.build) or patch_of_minor

    def published_as(self, on: CudaOnArch | None) -> CudaRelease:
        """The release's nvidia/cuda images as published for another CPU architecture (None: none known)."""
        kept = tuple(u for u in self.provenance.unconfirmed if not u.startswith("images"))
        unconfirmed = kept + (on.provenance.unconfirmed if on else ())
        source = f"{self.provenance.source}; {on.provenance.source}" if on else self.provenance.source
        return replace(
            self,
            images=on.images if on else (),
            cudnn_images=on.cudnn_images if on else (),
            provenance=Provenance(source, self.provenance.checked, unconfirmed),
        )


@dataclass(frozen=True)
class RocmRelease:
    """A ROCm release PyTorch ships wheels for: download.pytorch.org/whl/rocm6.4 holds 2.9.1+rocm6.4."""

    version: str  # "6.4", or "6.2.4" where torch's build names the patch
    build: str  # "rocm6.4"
    release: str  # "6.4.4": the patch torch's builder images use, and the tag of its rocm/dev-* images
    os: tuple[str, ...]  # what AMD's compatibility matrix supports it on: "ubuntu24.04", "rhel9", "sles15", ...
    images: tuple[str, ...]  # OS names with rocm/dev-* images of it ("ubuntu22.04", "ubuntu24.04")
    provenance: Provenance

    def names(self, rocm: str) -> bool:
        """Whether `rocm` names this release: its version, build or release, or a patch of its minor ("6.4.1")."""
        wanted = rocm.lower().removeprefix("rocm")
        parts = wanted.split(".")
        patch_of_minor = len(parts) == 3 and ".".join(parts[:2]) == self.version
        return wanted in (self.version, self.release) or patch_of_minor


@dataclass(frozen=True)
class TorchRocm:
    """The ROCm builds of one torch release, each with the GPU code it carries (PYTORCH_ROCM_ARCH)."""

    torch: str
    arch: dict[str, tuple[str, ...]]  # build -> ("gfx90a", "gfx942", ...)
    provenance: Provenance

    def build_confirmed(self, build: str) -> bool:
        disputed = ("builds", f"build:{build}", f"arch:{build}")
        return not any(u in disputed for u in self.provenance.unconfirmed)


@dataclass(frozen=True)
class AmdGpu:
    name: str  # "MI300X"
    gfx: str  # LLVM target, "gfx942"
    aliases: tuple[str, ...]
    pci_ids: tuple[str, ...]  # PCI device ids under vendor 1002, lower-case hex: "74a1"
    min_rocm: str | None  # first ROCm release that supports it; None: every release the KB knows
    provenance: Provenance


@dataclass(frozen=True)
class Architecture:
    sm: str  # "9.0"
    family: str
    open_modules: str  # "unsupported" | "recommended" | "required"
    min_cuda: str | None  # first nvcc that compiles for it (a floor for building, not for running)
    provenance: Provenance


@dataclass(frozen=True)
class Gpu:
    name: str
    sm: str
    aliases: tuple[str, ...]
    nvswitch_systems: bool
    cpu_arch: str | None = None  # the CPU every system of this GPU has ("aarch64": Grace); None: any
    open_modules: str | None = None  # "required" where the GPU needs NVIDIA's open kernel modules whatever its sm
    datacenter: bool | None = None  # a data center GPU, the kind CUDA forward compatibility serves; None: not recorded
    unconfirmed: tuple[str, ...] = ()  # facts of the row not settled from its sources ("datacenter")


@dataclass(frozen=True)
class PciDevice:
    device_id: str  # PCI device id under vendor 10de, lower-case hex: "20b0"
    name: str  # as pci.ids names it: "GA100 [A100 SXM4 40GB]"
    gpu: Gpu

    @property
    def sm(self) -> str:
        return self.gpu.sm


@dataclass(frozen=True)
class DriverBranch:
    branch: str  # "R580"
    lts: bool
    latest: str | None  # newest release known; None when none is confirmed
    kind: str = "production"  # "lts" | "production" | "new-feature"

    @property
    def major(self) -> int:
        return int(self.branch[1:])


@dataclass(frozen=True)
class AnsibleNames:
    """How Ansible's facts name an OS."""

    distribution: str  # ansible_facts.distribution: "Ubuntu", "Debian", "Rocky"
    os_family: str  # ansible_facts.os_family: "Debian", "RedHat"


@dataclass(frozen=True)
class OsInfo:
    """Everything gpuenv knows about one OS release: the one home of OS facts (docs/knowledge-base.md)."""

    name: str  # "ubuntu22.04": the --os value, and the suffix of its nvidia/cuda image tags
    family: str
    version: str  # "22.04", or the major alone ("12", "9") for an OS whose point releases share it
    package_manager: str  # "apt" | "dnf"
    roles: tuple[str, ...]  # "image" and/or "host"
    system_python: str
    python: dict[str, PythonSource]
    ansible: AnsibleNames | None = None  # None: not a host gpuenv provisions
    codename: str | None = None  # the apt suite third-party repositories (deadsnakes) are published for
    build_tools_repo: str | None = None  # dnf: the repository devel images enable for ninja-build
    image: str | None = None  # the OS's own container image ("ubuntu:22.04"): a CPU stack's base

    def names_host(self, distribution: str, version: str) -> bool:
        """Whether Ansible's distribution facts name this OS: the whole version ("22.04"), or
        the major for an OS versioned by its major ("12.5" is debian12)."""
        if self.ansible is None or distribution.lower() != self.ansible.distribution.lower():
            return False
        return version == self.version or ("." not in self.version and version.split(".")[0] == self.version)


@dataclass(frozen=True)
class KnowledgeBase:
    torch: tuple[TorchRelease, ...]
    cuda: tuple[CudaRelease, ...]
    architectures: tuple[Architecture, ...]
    gpus: tuple[Gpu, ...]
    driver_branches: tuple[DriverBranch, ...]
    os: tuple[OsInfo, ...]
    wheel_index: str
    generated: str  # YYYY-MM-DD: the date the facts were gathered
    pci_devices: tuple[PciDevice, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)
    origin: str = "shipped"
    rocm: tuple[RocmRelease, ...] = ()  # empty in knowledge bases written before ROCm
    torch_rocm: tuple[TorchRocm, ...] = ()
    amd_gpus: tuple[AmdGpu, ...] = ()
    torch_cpu_arch: tuple[TorchOnArch, ...] = ()  # the torch rows as published for other CPU architectures
    cuda_cpu_arch: tuple[CudaOnArch, ...] = ()
    rows_cpu_arch: str = "x86_64"  # the CPU architecture the torch and cuda rows' wheels and images were read for

    @property
    def cpu_arches(self) -> tuple[str, ...]:
        """The CPU architectures whose wheel facts the knowledge base holds."""
        return (self.rows_cpu_arch, *dict.fromkeys(t.cpu_arch for t in self.torch_cpu_arch))

    def for_cpu_arch(self, name: str) -> KnowledgeBase | None:
        """The knowledge base as torch's wheels and NVIDIA's images are for CPU architecture `name` (a release
        or CUDA row it lacks has none for it); None when it holds no wheel facts for that architecture."""
        if name == self.rows_cpu_arch:
            return self
        torch = {t.torch: t for t in self.torch_cpu_arch if t.cpu_arch == name}
        if not torch:
            return None
        cuda = {c.cuda: c for c in self.cuda_cpu_arch if c.cpu_arch == name}
        return replace(
            self,
            torch=tuple(t.published_as(torch.get(t.version)) for t in self.torch),
            cuda=tuple(c.published_as(cuda.get(c.version)) for c in self.cuda),
            rows_cpu_arch=name,
        )

    @cached_property
    def rocm_by_build(self) -> dict[str, RocmRelease]:
        return {r.build: r for r in self.rocm}

    def rocm_builds(self, torch: str) -> TorchRocm | None:
        """The ROCm builds of a torch release, or None when it has none the knowledge base knows."""
        return next((t for t in self.torch_rocm if t.torch == torch), None)

    def find_amd_gpu(self, name: str) -> AmdGpu | None:
        found = self.gpu_named(name)
        return found if isinstance(found, AmdGpu) else None

    def gpu_named(self, name: str) -> Gpu | AmdGpu | None:
        """The model of either vendor a name means, spelled as a user, nvidia-smi, NVML or amd-smi spells it
        ("H100", "RTX5090", "Tesla V100-SXM2-32GB", "NVIDIA H100 80GB HBM3", "AMD Instinct MI300X"): the model
        whose name, alias or PCI name its longest run of leading words spells."""
        words = _name_words(name)
        for count in range(len(words), 0, -1):
            found = self._gpu_names.get("".join(words[:count]))
            if found is not None:
                return found
        return None

    @property
    def models(self) -> tuple[Gpu | AmdGpu, ...]:
        """Every GPU model, NVIDIA's then AMD's."""
        return (*self.gpus, *self.amd_gpus)

    def gpus_like(self, name: str) -> list[str]:
        """The models of either vendor nearest a name no model has, nearest first (for a "did you mean")."""
        import difflib  # only on the way to an error

        models = {"".join(_name_words(g.name)): g.name for g in self.models}
        near = difflib.get_close_matches("".join(_name_words(name)), models, n=3, cutoff=0.6)
        return [models[key] for key in near]

    @cached_property
    def _gpu_names(self) -> dict[str, Gpu | AmdGpu]:
        """Every name of every model, its words run together: its own, its aliases, its PCI rows' ("GV100GL
        [Tesla V100 SXM2 32GB]" is "v100sxm232gb")."""
        named: dict[str, Gpu | AmdGpu] = {}
        for gpu in self.models:
            for name in (gpu.name, *gpu.aliases):
                named.setdefault("".join(_name_words(name)), gpu)
        for device in self.pci_devices:
            model = device.name.partition("[")[2].rstrip("]") or device.name
            named.setdefault("".join(_name_words(model)), device.gpu)
        return named

    @cached_property
    def cuda_by_build(self) -> dict[str, CudaRelease]:
        return {c.build: c for c in self.cuda}

    @cached_property
    def os_by_name(self) -> dict[str, OsInfo]:
        return {o.name: o for o in self.os}

    def os_for_host(self, distribution: str, version: str) -> OsInfo | None:
        """The OS row Ansible's distribution facts name ("Debian", "12.5" -> debian12), or None."""
        return next((o for o in self.os if o.names_host(distribution, version)), None)

    def find_cuda(self, cuda: str) -> CudaRelease | None:
        """A CUDA release by minor ("11.7"), toolkit ("11.7.1") or build ("cu117"); another patch of a
        known minor ("12.4.0") finds that minor's row, whose toolkit is its newest patch."""
        return next((row for row in self.cuda if row.names(cuda)), None)

    def arch(self, sm: str) -> Architecture | None:
        return next((a for a in self.architectures if a.sm == sm), None)

    def find_gpu(self, name: str) -> Gpu | None:
        found = self.gpu_named(name)
        return found if isinstance(found, Gpu) else None

    def index_url(self, build: str) -> str:
        return self.wheel_index.format(build=build)

    @cached_property
    def pci_by_id(self) -> dict[str, PciDevice]:
        return {d.device_id: d for d in self.pci_devices}


_VENDOR_WORDS = frozenset({"nvidia", "geforce", "tesla", "amd", "instinct"})  # what leads the vendors' own names


def _name_words(name: str) -> list[str]:
    """'NVIDIA A100-SXM4-80GB' -> ['a100', 'sxm4', '80gb']: the words of a GPU's name, less the vendor's."""
    words = re.findall(r"[a-z0-9]+", name.lower())
    while words and words[0] in _VENDOR_WORDS:
        words.pop(0)
    return words


@cache  # a Version is immutable; loading and resolving parse the same few strings over a thousand times
def V(text: str) -> Version:
    """A comparable version; driver versions like 535.104.05 parse too."""
    return Version(text)


def _about_builds(unconfirmed: str) -> bool:
    return unconfirmed == "builds" or unconfirmed.startswith(("build:", "arch:"))


def _sm_digits(sm: str) -> str:
    return sm.replace(".", "")
