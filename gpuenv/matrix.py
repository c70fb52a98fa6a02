"""The knowledge base as tables, filtered by torch and CUDA: the application service behind `gpuenv matrix`.

The default tables are CUDA's (torch releases with their CUDA builds, the CUDA rows, the driver
branches); ROCm's come from its platform package (gpuenv.platforms.rocm.tables, `matrix --rocm`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date
from typing import Any

from gpuenv.errors import BadRequest
from gpuenv.kb import (
    Architecture,
    CudaRelease,
    KnowledgeBase,
    TorchRelease,
    driver_runs_cuda,
    gpu_code_for,
    kb_age_days,
    kb_age_line,
    staleness_warning,
)
from gpuenv.platforms.arch import DEFAULT_CPU_ARCH
from gpuenv.platforms.cuda.resolve import gpu_architecture, rows_named
from gpuenv.platforms.registry import DEFAULT_PLATFORM, claims, request_arch
from gpuenv.platforms.rocm.tables import AMD_GPU_COLUMNS, ROCM_COLUMNS, amd_gpu_rows, rocm_rows
from gpuenv.resolve.request import Request, torch_matches
from gpuenv.stack_service import Warn

__all__ = ["AMD_GPU_COLUMNS", "ROCM_COLUMNS", "amd_gpu_rows", "rocm_rows"]  # ROCm's tables, for `matrix --rocm`

TORCH_COLUMNS = ("torch", "torchvision", "torchaudio", "CUDA builds", "PyPI default", "Python", "unconfirmed")
CUDA_COLUMNS = ("CUDA", "toolkit", "bundled driver", "floor", "cuDNN", "images", "EOL", "unconfirmed")


@dataclass(frozen=True)
class MatrixRequest:
    torch: str | None = None
    cuda: str | None = None
    gpu: str | None = None  # only the builds with code for this GPU ("H100" or "sm_90")
    cpu_arch: str | None = None  # what is published for this CPU architecture; None: x86_64 (or the GPU's)


@dataclass(frozen=True)
class Matrix:
    torches: tuple[TorchRelease, ...]
    cudas: tuple[CudaRelease, ...]
    generated: str  # when the knowledge base was made
    age_days: int
    age_line: str  # "knowledge base: shipped, generated ... (N days old)"
    cpu_arch: str = DEFAULT_CPU_ARCH

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpu_arch": self.cpu_arch,
            "generated": self.generated,
            "age_days": self.age_days,
            "torch": [_torch_dict(t) for t in self.torches],
            "cuda": [_cuda_dict(c) for c in self.cudas],
        }

    def torch_rows(self) -> list[tuple[str, ...]]:
        return [
            (
                t.version,
                t.torchvision or "—",
                t.torchaudio or "—",
                " ".join(t.builds),
                t.default_build,
                f"{t.python[0]}–{t.python[-1]}",
                ", ".join(t.provenance.unconfirmed),
            )
            for t in self.torches
        ]

    def cuda_rows(self) -> list[tuple[str, ...]]:
        return [
            (
                c.version,
                c.toolkit,
                c.bundled_driver,
                c.minor_compat_floor,
                c.cudnn or "?",
                " ".join(c.images),
                "deleted" if c.toolkit in c.deleted_tags else "yes" if c.eol else "",
                ", ".join(c.provenance.unconfirmed),
            )
            for c in self.cudas
        ]


def matrix(kb: KnowledgeBase, request: MatrixRequest, *, today: date, on_warning: Warn | None = None) -> Matrix:
    """The torch releases and CUDA rows that match the request; BadRequest when nothing does.

    on_warning hears that the knowledge base is stale, before anything else.
    """
    warning = staleness_warning(kb, today)
    if warning and on_warning is not None:
        on_warning(warning)
    arch = request_arch(kb, Request(gpu=request.gpu, cpu_arch=request.cpu_arch))
    published = kb.for_cpu_arch(arch)
    if published is None:
        raise BadRequest(f"the knowledge base in use has no wheel facts for {arch}", hint="use the shipped one")
    kb = published
    named = rows_named(kb, request.cuda) if request.cuda else tuple(kb.cuda)
    if not named:
        known = ", ".join(c.version for c in kb.cuda)
        raise BadRequest(f"unknown CUDA version {request.cuda}", hint=f"known: {known}")
    torches = tuple(
        t
        for t in kb.torch
        if (not request.torch or torch_matches(t.version, request.torch)) and any(c.build in t.builds for c in named)
    )
    if request.torch and not torches:
        known = ", ".join(t.version for t in kb.torch)
        raise BadRequest(f"no torch release matches {request.torch}", hint=f"known: {known}")
    if request.gpu:
        torches = _for_gpu(torches, architecture(kb, request.gpu), request.gpu)
    cudas = tuple(c for c in named if not request.torch or any(c.build in t.builds for t in torches))
    return Matrix(torches, cudas, kb.generated, kb_age_days(kb, today), kb_age_line(kb, today), arch)


def architecture(kb: KnowledgeBase, gpu: str) -> Architecture:
    """The architecture of a GPU model ("H100") or a compute capability ("sm_90"); BadRequest naming the known."""
    other = next((name for name in claims(kb, Request(gpu=gpu)) if name != DEFAULT_PLATFORM), None)
    if other is not None:
        raise BadRequest(f"{gpu} is an AMD GPU: these tables are CUDA's", hint=f"see gpuenv matrix --{other}")
    return gpu_architecture(kb, gpu)


def _for_gpu(torches: tuple[TorchRelease, ...], arch: Architecture, gpu: str) -> tuple[TorchRelease, ...]:
    """Each release with only its builds that carry code (SASS or PTX) for the architecture."""
    kept = []
    for t in torches:
        builds = tuple(b for b in t.builds if gpu_code_for(t.arch[b], arch.sm) is not None)
        if builds:
            default = t.default_build if t.default_build in builds else builds[-1]
            kept.append(replace(t, builds=builds, default_build=default))
    if not kept:
        raise BadRequest(f"no torch build in the knowledge base runs on {gpu} (sm_{arch.sm.replace('.', '')})")
    return tuple(kept)


DRIVER_COLUMNS = ("branch", "kind", "latest", "max CUDA", "with minor-version compat", "torch builds it runs")


def driver_rows(kb: KnowledgeBase) -> list[tuple[str, ...]]:
    """`gpuenv matrix --drivers`: each driver branch, the newest CUDA it runs natively (and through
    minor-version compatibility), and the torch builds it runs natively, as version ranges per build."""
    return [_driver_row(kb, branch.branch, branch.kind, branch.latest) for branch in kb.driver_branches]


def _driver_row(kb: KnowledgeBase, branch: str, kind: str, latest: str | None) -> tuple[str, ...]:
    major = branch.lstrip("R")
    modes = {c.version: driver_runs_cuda(kb, major, c.version).mode for c in kb.cuda}
    native = [c for c in kb.cuda if modes[c.version] == "native"]
    compat = [c for c in kb.cuda if modes[c.version] != "no"]
    builds = []
    for cuda in native:
        versions = [t.version for t in kb.torch if cuda.build in t.builds]
        if versions:
            builds.append(f"{cuda.build} {versions[0]}" + (f"–{versions[-1]}" if len(versions) > 1 else ""))
    return (
        branch,
        kind,
        latest or "?",
        native[-1].version if native else "—",
        compat[-1].version if compat else "—",
        ", ".join(builds) or "—",
    )


def _torch_dict(t: TorchRelease) -> dict[str, Any]:
    return {
        "torch": t.version,
        "torchvision": t.torchvision,
        "torchaudio": t.torchaudio,
        "builds": list(t.builds),
        "default_build": t.default_build,
        "arch": {build: str(code) for build, code in t.arch.items()},
        "python": list(t.python),
        "python_experimental": list(t.python_experimental),
        "source": t.provenance.source,
        "checked": t.provenance.checked,
        "unconfirmed": list(t.provenance.unconfirmed),
    }


def _cuda_dict(c: CudaRelease) -> dict[str, Any]:
    return {
        "cuda": c.version,
        "build": c.build,
        "toolkit": c.toolkit,
        "bundled_driver": c.bundled_driver,
        "minor_compat_floor": c.minor_compat_floor,
        "cudnn": c.cudnn,
        "cudnn_tag": c.cudnn_tag,
        "images": list(c.images),
        **({"cudnn_images": list(c.cudnn_images)} if c.cudnn_images is not None else {}),
        "eol": c.eol,
        "deleted_tags": list(c.deleted_tags),
        "source": c.provenance.source,
        "checked": c.provenance.checked,
        "unconfirmed": list(c.provenance.unconfirmed),
    }
