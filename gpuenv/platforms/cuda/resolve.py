"""CUDA's resolve half: torch's +cu wheels for NVIDIA GPUs. Pure.

The builds of a release are those --cuda names (a minor "12.4", a patch "12.4.1", a release line "12", or
the build "cu124"); a build is ruled out for an image by a missing nvidia/cuda image on the OS, by a
--driver that cannot run it, or by a --gpu it carries no code for. Usable builds rank by: fit for a
default, newest torch, a confirmed build, one the driver runs natively, the build of torch's plain PyPI
wheel, the newest CUDA.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Literal

from gpuenv import validate
from gpuenv.errors import BadRequest
from gpuenv.kb import (
    Architecture,
    CudaRelease,
    ForwardCompat,
    Gpu,
    KnowledgeBase,
    OsInfo,
    TorchRelease,
    V,
    driver_runs_cuda,
    forward_compat,
    gpu_code_for,
    in_cuda_image,
    recommended_branch,
)
from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.base import Claim, Row, unknown_gpu
from gpuenv.platforms.cuda import reasons as explain
from gpuenv.resolve.candidates import Candidate, Refused
from gpuenv.resolve.ranking import fit_for_default
from gpuenv.resolve.request import Request, numpy_requirement, torch_matches
from gpuenv.stack import Rejected, Stack

# Patterns as text, compiled at their first use (re's cache): a command that never reads them pays nothing.
_BUILD = r"cu(\d{1,2})(\d)"  # torch's build names: cu118, cu124, cu130
_RELEASE = r"\d{1,2}(\.\d{1,2}){0,2}"  # 12, 12.4, 12.4.1
_ARCH_LIST = r"\d{1,2}\.\d(\+PTX)?(;\d{1,2}\.\d(\+PTX)?)*"
SPELLINGS = "12.4, 12.4.1, 12 (a release line) or cu124 (the wheel build, as uv and pip name it)"
RANK_WORDS = (
    "not settled (unconfirmed builds or no torchvision yet): give --torch to use it",
    "an older release",
    "its build is unconfirmed",
    "the driver runs it only through minor-version compatibility",
    "{best} is the build of torch's plain PyPI wheel",
    "an older CUDA than {best}",
)


def release(text: str) -> str | None:
    """The CUDA release `text` names: "12.4", "12.4.1", "12", or the build "cu124" (as 12.4); None if none."""
    found = re.fullmatch(_BUILD, text.lower(), re.ASCII)
    if found:
        return f"{int(found.group(1))}.{found.group(2)}"
    return text if re.fullmatch(_RELEASE, text, re.ASCII) else None


def rows_named(kb: KnowledgeBase, wanted: str) -> tuple[CudaRelease, ...]:
    """The CUDA rows `wanted` names in any spelling: one minor, or every minor of a release line ("12")."""
    text = release(wanted) or wanted
    if "." not in text:
        return tuple(c for c in kb.cuda if c.version.split(".")[0] == text)
    return tuple(c for c in kb.cuda if c.names(text))


def gpu_architecture(kb: KnowledgeBase, gpu: str) -> Architecture:
    """The architecture of an NVIDIA model ("H100") or compute capability ("sm_90"); BadRequest naming the known."""
    if gpu.lower().startswith("sm_"):
        digits = gpu[3:]
        arch = kb.arch(f"{digits[:-1]}.{digits[-1]}")
        if arch is None:
            raise BadRequest(
                f"unknown compute capability {gpu}",
                hint=f"known: {', '.join('sm_' + a.sm.replace('.', '') for a in kb.architectures)}",
            )
        return arch
    found = kb.find_gpu(gpu)
    if found is None:
        raise unknown_gpu(kb, gpu)
    arch = kb.arch(found.sm)
    assert arch is not None  # guaranteed by the schema check
    return arch


def gpu_model(kb: KnowledgeBase, gpu: str | None) -> Gpu | None:
    """The NVIDIA model --gpu names; None for a compute capability (sm_90), which names no model, or no --gpu."""
    return kb.find_gpu(gpu) if gpu and not gpu.lower().startswith("sm_") else None


class CudaResolve:
    option = "cuda"
    label: str = "CUDA"
    spellings: str = SPELLINGS

    builds_spelled: str = "cu118, cu124, cu130, … (cu and CUDA's major and minor)"

    def __init__(self, cpu_arch: CpuArchFacts) -> None:
        self.cpu_arch = cpu_arch

    def claims(self, kb: KnowledgeBase, request: Request) -> Claim | None:
        return Claim(f"--cuda {request.cuda}") if request.cuda else None

    def owns(self, build: str) -> bool:
        return bool(re.fullmatch(_BUILD, build, re.ASCII))

    def asks(self, build: str) -> dict[str, str]:
        return {"cuda": build}

    def release(self, text: str) -> str | None:
        return release(text)

    def pin(self, kb: KnowledgeBase, request: Request, version: str, build: str) -> Request | None:
        """--torch 2.4.0+cu121 is --torch 2.4.0 --cuda cu121 (refused if --cuda says otherwise); None: not cu."""
        if not self.owns(build):
            return None
        row = kb.find_cuda(build)
        if row is None:
            raise BadRequest(
                f"unknown CUDA build {build} in torch version {request.torch}",
                hint=f"known builds: {', '.join(c.build for c in kb.cuda)}",
            )
        if request.cuda and row not in rows_named(kb, request.cuda):
            raise BadRequest(
                f"--torch {request.torch} names build {build}, but --cuda asks for {request.cuda}",
                hint=f"drop --cuda, or ask for --torch {version}",
            )
        return replace(request, torch=version, cuda=row.build)

    def start(self, kb: KnowledgeBase, request: Request, os_info: OsInfo) -> CudaResolution:
        arch = gpu_architecture(kb, request.gpu) if request.gpu else None
        if request.cuda and not rows_named(kb, request.cuda):
            raise BadRequest(
                f"unknown CUDA version {request.cuda}",
                hint=f"known: {', '.join(c.version for c in kb.cuda)}; spelled {SPELLINGS}",
            )
        return CudaResolution(kb, request, os_info, arch, self.cpu_arch)

    def rows(self, stack: Stack) -> list[Row]:
        return [
            ("CUDA build", stack.build, "build"),
            ("CUDA toolkit", stack.cuda, "cuda"),
            ("cuDNN", stack.cudnn or "unknown", "cudnn"),
            ("Python", f"{stack.python} ({stack.python_source.via})", "python"),
            ("OS", stack.os, "os"),
            ("wheel index", stack.index_url, None),
            ("driver min", stack.driver_min, "driver_min"),
            ("driver floor", stack.driver_floor, "driver_floor"),
            ("driver branch", stack.driver_branch, "driver_branch"),
        ]

    def software(self, stack: Stack) -> str:
        return f"CUDA {stack.cuda}"

    def check_stack(self, stack: Stack) -> None:
        """A cu build, a CUDA toolkit, the driver floors, a TORCH_CUDA_ARCH_LIST, and nothing of an AMD GPU."""
        if not self.owns(stack.build):
            raise BadRequest(
                f"a CUDA stack's build is cu and CUDA's release, not {stack.build}", hint="regenerate the stack"
            )
        validate.version(stack.cuda, "stack cuda")
        validate.driver(stack.driver_min)
        validate.driver(stack.driver_floor)
        if stack.gpu_gfx is not None:
            raise BadRequest("a CUDA stack has no gpu_gfx", hint="regenerate the stack")
        if not re.fullmatch(_ARCH_LIST, stack.arch_list, re.ASCII):
            raise BadRequest(f"stack arch_list {stack.arch_list!r} is invalid", hint="e.g. 8.0;8.6;9.0")


class CudaResolution:
    """The request's resolution on this platform, its inputs checked (its half's `start`)."""

    option = "cuda"
    rank_words = RANK_WORDS

    def __init__(
        self, kb: KnowledgeBase, request: Request, os_info: OsInfo, arch: Architecture | None, cpu_arch: CpuArchFacts
    ) -> None:
        self.kb = kb
        self.request = request
        self.os_info = os_info
        self.arch = arch
        self.cpu_arch = cpu_arch

    def builds(self, torch: TorchRelease) -> tuple[tuple[str, ...], str]:
        wanted, on = self.request.cuda, self.cpu_arch.name
        named = rows_named(self.kb, wanted) if wanted else ()
        builds = tuple(b for b in torch.builds if not wanted or self.kb.cuda_by_build[b] in named)
        if not torch.builds:
            return (), f"publishes no CUDA wheels for {on}"
        return builds, f"built for {', '.join(torch.builds)} on {on}, not CUDA {wanted}"

    def why_not(self, torch: TorchRelease, build: str) -> tuple[str, str] | None:
        cuda, request, os_info = self.kb.cuda_by_build[build], self.request, self.os_info
        if request.purpose == "image" and not has_image(cuda, os_info):
            return "image", f"no nvidia/cuda {cuda.toolkit} image for {os_info.name}"
        if request.driver:
            compat = driver_runs_cuda(self.kb, request.driver, build)
            if not compat.ok:
                forward = self.forward_compat(build)
                if forward is not None and forward.mode == "compat":  # said, never chosen: it needs installing
                    return "driver", f"{compat.message}; {forward.message}, installed or in an nvidia/cuda image"
                return "driver", compat.message
            in_image = self.in_image(build)
            if in_image is not None and in_image[0] == "no":
                return "driver", in_image[1]
        if self.arch is not None and gpu_code_for(torch.arch[build], self.arch.sm) is None:
            code, arch = torch.arch[build], self.arch
            return "gpu", f"its GPU code is {code.span()}: no kernel for {arch.family} sm_{arch.sm.replace('.', '')}"
        return None

    def forward_compat(self, build: str) -> ForwardCompat | None:
        """Whether NVIDIA's cuda-compat package runs the build on the request's driver and GPU; None: no driver."""
        if not self.request.driver:
            return None
        return forward_compat(self.kb, build, self.request.driver, gpu_model(self.kb, self.request.gpu))

    def in_image(self, build: str) -> tuple[Literal["caveat", "no"], str] | None:
        """How an nvidia/cuda image of the build fares on the request's driver and GPU (its base carries cuda-compat);
        None: not an image, no driver, or the driver alone decides."""
        forward = self.forward_compat(build) if self.request.purpose == "image" else None
        return in_cuda_image(forward) if forward is not None else None

    def rank(self, c: Candidate) -> tuple[Any, ...]:
        request, cuda = self.request, self.kb.cuda_by_build[c.build]
        native = request.driver is None or driver_runs_cuda(self.kb, request.driver, c.build).mode == "native"
        return (
            request.torch is not None or fit_for_default(c.torch, c.build),
            V(c.torch.version),
            c.torch.build_confirmed(c.build),
            native,
            c.build == c.torch.default_build,
            V(cuda.version),
        )

    def stack(self, best: Candidate, survivors: list[Candidate], rejected: tuple[Rejected, ...]) -> Stack:
        kb, torch, os_info, arch = self.kb, best.torch, self.os_info, self.arch
        cuda = kb.cuda_by_build[best.build]
        images = base_images(cuda, os_info)
        return Stack(
            torch=torch.version,
            torchvision=torch.torchvision,
            torchaudio=torch.torchaudio,
            platform="cuda",
            build=cuda.build,
            cuda=cuda.toolkit,
            cudnn=cuda.cudnn,
            python=best.python,
            python_source=os_info.python[best.python],
            os=os_info.name,
            base_images=images,
            index_url=kb.index_url(cuda.build),
            numpy=numpy_requirement(torch.version),
            driver_min=cuda.bundled_driver,
            driver_floor=cuda.minor_compat_floor,
            driver_branch=driver_branch(kb, cuda, self.request.driver),
            gpu_sm=arch.sm if arch else None,
            arch_list=arch_list(kb, torch, cuda, arch),
            base_image_eol=bool(images) and (cuda.eol or cuda.toolkit in cuda.deleted_tags),
            reasons=explain.reasons(kb, best, self.request, os_info, arch, survivors),
            rejected=rejected,
            warnings=tuple(explain.warnings(kb, best, self.request, os_info, arch, self.forward_compat(best.build))),
            cpu_arch=self.cpu_arch.name,
        )

    def refusal_line(self, constraint: str, refused: list[Refused], flag: str) -> str | None:
        if constraint == "gpu" and self.arch is not None:
            return self._gpu_line(refused, flag, self.arch)
        if constraint != "image":
            return None
        name = self.os_info.name
        toolkits = ", ".join(dict.fromkeys(self.kb.cuda_by_build[r.build].toolkit for r in refused))
        return f"--os {name}: nvidia/cuda has no {name} image for CUDA {toolkits}"

    def _gpu_line(self, refused: list[Refused], flag: str, arch: Architecture) -> str:
        """The builds without code for the GPU, by the GPU code they carry instead."""
        by_code: dict[str, list[str]] = {}
        for r in refused:
            by_code.setdefault(r.torch.arch[r.build].span(), []).append(f"{r.torch.version}+{r.build}")
        builds = " or ".join(
            f"{names[0]} … {names[-1]} ({len(names)} builds, GPU code {code})"
            if len(names) > 4
            else f"{', '.join(names)} (GPU code {code})"
            for code, names in by_code.items()
        )
        return f"{flag}: no kernel for {arch.family} sm_{arch.sm.replace('.', '')} in torch {builds}"

    def hints(self) -> list[str]:
        kb, request, tried = self.kb, self.request, []
        on = self.cpu_arch.name
        if request.torch:
            builds = sorted({b for t in kb.torch if torch_matches(t.version, request.torch) for b in t.builds})
            if request.cuda or not builds:
                tried.append(f"torch {request.torch} is built for {', '.join(builds) or 'no CUDA'} on {on}")
            if not builds:
                having = [t.version for t in kb.torch if t.builds]
                tried.append(f"CUDA wheels for {on} exist for torch {having[0]}–{having[-1]}" if having else "")
        if self.arch is not None:
            tried.append(explain.gpu_hint(kb, request, self.arch))
        named = rows_named(kb, request.cuda) if request.cuda else ()
        if len(named) == 1:
            releases = [t.version for t in kb.torch if named[0].build in t.builds]
            if releases:
                tried.append(f"{named[0].build} exists for torch {_spans(kb, releases)} on {on}")
            else:
                tried.append(f"no torch release is built for CUDA {named[0].version} on {on}")
        return tried


def _spans(kb: KnowledgeBase, releases: list[str]) -> str:
    """'2.7.0–2.7.1, 2.9.0–2.11.0': the releases as runs of consecutive known releases."""
    known = [t.version for t in kb.torch]
    runs: list[list[str]] = []
    for version in releases:
        if runs and known.index(runs[-1][-1]) + 1 == known.index(version):
            runs[-1].append(version)
        else:
            runs.append([version])
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]}–{run[-1]}" for run in runs)


def driver_branch(kb: KnowledgeBase, cuda: CudaRelease, driver: str | None) -> str:
    """The branch a host of the stack keeps: the given driver's own (535.104.05 is R535), else the one recommended
    for the CUDA."""
    return f"R{driver.split('.')[0]}" if driver else recommended_branch(kb, cuda).branch


def has_image(cuda: CudaRelease, os_info: OsInfo) -> bool:
    """Whether an image can be based on nvidia/cuda for this CUDA and OS (a host-only OS has none to miss)."""
    return "image" not in os_info.roles or os_info.name in cuda.images


def base_images(cuda: CudaRelease, os_info: OsInfo) -> dict[str, str]:
    if "image" not in os_info.roles or os_info.name not in cuda.images:
        return {}
    repo, tk, osn, dnn = "nvidia/cuda", cuda.toolkit, os_info.name, cuda.cudnn_tag
    images = {
        "base": f"{repo}:{tk}-base-{osn}",
        "runtime": f"{repo}:{tk}-runtime-{osn}",
        "devel": f"{repo}:{tk}-devel-{osn}",
    }
    if cuda.cudnn_images is None or osn in cuda.cudnn_images:  # some cuDNN images are amd64 only
        images |= {"cudnn-runtime": f"{repo}:{tk}-{dnn}-runtime-{osn}", "cudnn-devel": f"{repo}:{tk}-{dnn}-devel-{osn}"}
    return images


def arch_list(kb: KnowledgeBase, torch: TorchRelease, cuda: CudaRelease, arch: Architecture | None) -> str:
    """TORCH_CUDA_ARCH_LIST for extensions: the GPU's own, else the release's, less what nvcc cannot target."""
    if arch is not None:
        return arch.sm
    code = torch.arch[cuda.build]
    keep = [sm for sm in code.sass if (a := kb.arch(sm)) is None or not a.min_cuda or V(cuda.version) >= V(a.min_cuda)]
    return ";".join(sm + ("+PTX" if sm in code.ptx else "") for sm in keep)
