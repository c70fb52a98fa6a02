"""Helpers shared by the torch checks (torch is imported inside the functions)."""

from __future__ import annotations

from typing import Any

from gpuenv.verify.model import Finding, fail


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
    return fail(
        message,
        "install the driver and a CUDA build of torch that matches it (gpuenv resolve --driver auto), then rerun",
        action="reinstall-stack",
        item="cuda",
    )


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
    import torch

    if getattr(device, "type", device) == "cuda":
        torch.cuda.synchronize()
