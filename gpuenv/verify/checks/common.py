"""Helpers shared by the torch checks (torch is imported inside the functions)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuenv.verify.model import Finding


def torch_module() -> Any:
    """torch, typed as Any: its annotations are partial and vary across the versions verify supports."""
    import torch

    return torch


class CudaUnusable(Exception):
    """CUDA was expected (a GPU node) but torch cannot use it: a fail, never a CPU fallback."""


def cuda_problem() -> str | None:
    """Why torch cannot use CUDA here, or None when it can."""
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build on a GPU node"
    if not torch.cuda.is_available():
        return (
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no usable GPU: "
            "driver not loaded, too old, or no device visible to this process"
        )
    return None


def unusable_finding(message: str) -> Finding:
    from gpuenv.verify.catalogue import finding

    return finding("verify.cuda-unusable", message)


def workload_devices(device: str) -> list[Any]:
    """The torch devices the per-device workloads run on: every visible GPU, or the CPU."""
    import torch

    if device == "cpu":
        return [torch.device("cpu")]
    problem = cuda_problem()
    if problem:
        raise CudaUnusable(problem)
    return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]


def world_size(device: str, cpu_ranks: int) -> int:
    import torch

    if device == "cpu":
        return cpu_ranks
    problem = cuda_problem()
    if problem:
        raise CudaUnusable(problem)
    return int(torch.cuda.device_count())


def device_name(device: str) -> str:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return str(torch.cuda.get_device_name(0))
    return "cpu"


def sync(device: Any) -> None:
    """Wait for the work queued on this device (not on the current device: a timer around GPU 3's
    work that synchronises GPU 0 measures kernel launches)."""
    import torch

    if getattr(device, "type", device) == "cuda":
        torch.cuda.synchronize(device)


def path_or_none(value: str | None) -> Path | None:
    return Path(value) if value else None


@contextlib.contextmanager
def full_fp32() -> Iterator[None]:
    """fp32 matmuls and convolutions in full precision (no TF32) for the duration: through the
    `fp32_precision` settings where torch has them (2.9+), else the older `allow_tf32` flags."""
    torch = torch_module()
    backends = torch.backends
    targets: list[tuple[Any, str, object]]
    if hasattr(backends.cuda.matmul, "fp32_precision"):
        targets = [(backends.cuda.matmul, "fp32_precision", "ieee"), (backends.cudnn.conv, "fp32_precision", "ieee")]
    else:
        targets = [(backends.cuda.matmul, "allow_tf32", False), (backends.cudnn, "allow_tf32", False)]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in targets]
    try:
        for owner, name, value in targets:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
