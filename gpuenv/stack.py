"""The Stack: a fully pinned, matched set of versions, with the reasons for each choice.

It is what `resolve` prints with --json (schema "gpuenv.stack/2"), what `build-image` and
`provision` render from, and what `--stack FILE` reads back, so a stack resolved once is reused
exactly. A stack names its platform (cuda, rocm, cpu), torch's wheel build of it ("cu124",
"rocm6.4", "cpu") and the CPU architecture it was resolved for; what each platform's fields must
hold is the platform's rule (gpuenv.platforms), read back through gpuenv.stack_service.load_stack, which
also reads the schema /1 files written before platforms were named.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from gpuenv import validate
from gpuenv.errors import BadRequest
from gpuenv.types import CpuArch, PlatformName

SCHEMA = "gpuenv.stack/2"
SCHEMA_V1 = "gpuenv.stack/1"  # before stacks named their platform: "cuda_build" held the build of every platform
NONE = "none"  # what a platform leaves unset: the CUDA and NVIDIA driver fields of a ROCm or CPU stack
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)


@dataclass(frozen=True)
class PythonSource:
    """How an OS provides a Python: its own package, a distro extra, deadsnakes, AppStream."""

    via: str
    packages: tuple[str, ...]
    note: str


@dataclass(frozen=True)
class Rejected:
    choice: str
    why: str


@dataclass(frozen=True)
class Stack:
    torch: str
    torchvision: str | None
    torchaudio: str | None
    platform: PlatformName  # which GPU software the torch build runs on
    build: str  # torch's wheel build: "cu117", "rocm6.4" or "cpu"
    cuda: str  # full toolkit version, "11.7.1"; NONE for CPU and ROCm stacks
    cudnn: str | None
    python: str  # "3.10"
    python_source: PythonSource
    os: str
    base_images: dict[str, str]  # by variant; empty for a host-only OS
    index_url: str
    numpy: str  # a requirement the torch version works with, e.g. "numpy<2"
    driver_min: str  # the toolkit's bundled driver: runs the stack with no caveat
    driver_floor: str  # lowest driver that runs it through minor-version compatibility
    driver_branch: str  # recommended branch to install, e.g. "R580"
    gpu_sm: str | None  # compute capability the stack was resolved for, "9.0"
    arch_list: str  # TORCH_CUDA_ARCH_LIST ("7.0;7.5;8.0") or, on ROCm, PYTORCH_ROCM_ARCH ("gfx90a;gfx942")
    base_image_eol: bool
    reasons: dict[str, str] = field(default_factory=dict)
    rejected: tuple[Rejected, ...] = ()
    warnings: tuple[str, ...] = ()
    rocm: str | None = None  # the ROCm release of a ROCm stack ("6.4"); None for CUDA and CPU stacks
    gpu_gfx: str | None = None  # the AMD GPU architecture a ROCm stack was resolved for, "gfx942"
    cpu_arch: CpuArch = "x86_64"
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rejected"] = [asdict(r) for r in self.rejected]
        data["warnings"] = list(self.warnings)
        data["python_source"]["packages"] = list(self.python_source.packages)
        return {"schema": self.schema, **{k: v for k, v in data.items() if k != "schema"}}

    def requirements(self) -> list[str]:
        """pip requirement lines for the stack (torch, torchvision, torchaudio, numpy), pinned."""
        lines = [f"--index-url {self.index_url}", f"torch=={self.torch}"]
        if self.torchvision:
            lines.append(f"torchvision=={self.torchvision}")
        if self.torchaudio:
            lines.append(f"torchaudio=={self.torchaudio}")
        lines.append(self.numpy)
        return lines

    def validate(self) -> Stack:
        """What every platform's stack holds, re-checked before it reaches a template, a shell or Ansible
        (BadRequest if a value is off); what a platform's own fields hold, its `check_stack` checks."""
        for name in ("torch", "python"):
            validate.version(getattr(self, name), f"stack {name}")
        for name in ("torchvision", "torchaudio", "cudnn", "gpu_sm", "rocm"):
            if getattr(self, name) is not None:
                validate.version(getattr(self, name), f"stack {name}")
        validate.url(self.index_url, "stack index_url")
        validate.pip_requirement(self.numpy)
        for name, value in (("build", self.build), ("os", self.os), ("driver_branch", self.driver_branch)):
            if not _NAME.fullmatch(value):
                raise BadRequest(f"stack {name} {value!r} is invalid", hint="regenerate the stack")
        if self.schema != SCHEMA:
            raise BadRequest(f"stack schema {self.schema!r} is not {SCHEMA!r}", hint="regenerate the stack")
        for package in self.python_source.packages:
            validate.pip_requirement(package)  # Debian and RPM package names fit the same grammar
        for ref in self.base_images.values():
            validate.image_ref(ref, "stack base image")
        return self

    def unset(self, names: tuple[str, ...]) -> None:
        """BadRequest unless each field named holds NONE: what the stack's platform has no use for."""
        if any(getattr(self, name) != NONE for name in names):
            raise BadRequest(
                f"a {self.platform.upper()} stack has {NONE!r} for {', '.join(names)}", hint="regenerate the stack"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Stack:
        """A stack of the current schema (gpuenv.stack_service reads the older ones through their platform)."""
        if data.get("schema") != SCHEMA:
            raise BadRequest(
                f"not a gpuenv stack (schema {data.get('schema')!r}, expected {SCHEMA!r})",
                hint="write one with: gpuenv resolve ... --json > stack.json",
            )
        names = {f.name for f in fields(cls)}
        missing = sorted(n for n in names if n not in data and n not in _OPTIONAL)
        if missing:
            raise BadRequest(f"stack file lacks {', '.join(missing)}", hint="regenerate it with gpuenv resolve --json")
        values = {k: v for k, v in data.items() if k in names}
        src = data["python_source"]
        values["python_source"] = PythonSource(src["via"], tuple(src["packages"]), src["note"])
        values["rejected"] = tuple(Rejected(**r) for r in data.get("rejected", []))
        values["warnings"] = tuple(data.get("warnings", []))
        return cls(**values)


# Stack files written before ROCm lack rocm and gpu_gfx; before the CPU architecture was named, cpu_arch.
_OPTIONAL = ("reasons", "rejected", "warnings", "rocm", "gpu_gfx", "cpu_arch")
