"""The knowledge base as tables, filtered by torch and CUDA: the application service behind `gpuenv matrix`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from gpuenv.compat import CudaRelease, KnowledgeBase, TorchRelease, kb_age_days, kb_age_line, staleness_warning
from gpuenv.errors import BadRequest
from gpuenv.resolve import torch_matches
from gpuenv.stacks import Warn

TORCH_COLUMNS = ("torch", "torchvision", "torchaudio", "CUDA builds", "PyPI default", "Python", "unconfirmed")
CUDA_COLUMNS = ("CUDA", "toolkit", "bundled driver", "floor", "cuDNN", "images", "EOL", "unconfirmed")


@dataclass(frozen=True)
class MatrixRequest:
    torch: str | None = None
    cuda: str | None = None


@dataclass(frozen=True)
class Matrix:
    torches: tuple[TorchRelease, ...]
    cudas: tuple[CudaRelease, ...]
    generated: str  # when the knowledge base was made
    age_days: int
    age_line: str  # "knowledge base: shipped, generated ... (N days old)"

    def to_dict(self) -> dict[str, Any]:
        return {
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
    cuda_row = kb.find_cuda(request.cuda) if request.cuda else None
    if request.cuda and cuda_row is None:
        known = ", ".join(c.version for c in kb.cuda)
        raise BadRequest(f"unknown CUDA version {request.cuda}", hint=f"known: {known}")
    torches = tuple(
        t
        for t in kb.torch
        if (not request.torch or torch_matches(t.version, request.torch))
        and (cuda_row is None or cuda_row.build in t.builds)
    )
    if request.torch and not torches:
        known = ", ".join(t.version for t in kb.torch)
        raise BadRequest(f"no torch release matches {request.torch}", hint=f"known: {known}")
    cudas = tuple(
        c
        for c in kb.cuda
        if (cuda_row is None or c is cuda_row) and (not request.torch or any(c.build in t.builds for t in torches))
    )
    return Matrix(torches, cudas, kb.generated, kb_age_days(kb, today), kb_age_line(kb, today))


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
        "eol": c.eol,
        "deleted_tags": list(c.deleted_tags),
        "source": c.provenance.source,
        "checked": c.provenance.checked,
        "unconfirmed": list(c.provenance.unconfirmed),
    }
