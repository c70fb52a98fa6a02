"""Helpers shared by the torch checks (torch is imported inside the functions)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuenv.adapters import nvml as adapter
from gpuenv.platforms import nodes
from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.catalogue import finding
from gpuenv.verify.figures import readings
from gpuenv.verify.model import Finding


def torch_module() -> Any:
    """torch, typed as Any: its annotations are partial and vary across the versions verify supports."""
    import torch  # torch: heavy, loaded only where the check runs

    return torch


class CudaUnusable(Exception):
    """CUDA was expected (a GPU node) but torch cannot use it: a fail, never a CPU fallback."""


def gpu_build(version: Any) -> str | None:
    """Pure: what GPU build torch is, from `torch.version`: "CUDA 12.8", "ROCm (HIP 6.4.43482)",
    or None for a CPU-only build, as the platforms' node halves read it (a ROCm build's GPUs are
    torch's "cuda" device all the same)."""
    return nodes.torch_build(version)


def cuda_problem() -> str | None:
    """Why torch cannot use its GPUs (CUDA or ROCm) here, or None when it can."""
    import torch  # torch: heavy, loaded only where the check runs

    build = gpu_build(torch.version)
    if build is None:
        return f"torch {torch.__version__} is a CPU-only build on a GPU node"
    if not torch.cuda.is_available():
        return (
            f"torch {torch.__version__} ({build}) sees no usable GPU: "
            "driver not loaded, too old, or no device visible to this process"
        )
    return None


def unusable_finding(message: str) -> Finding:
    return finding("verify.cuda-unusable", message)


def workload_devices(device: str) -> list[Any]:
    """The torch devices the per-device workloads run on: every visible GPU, or the CPU."""
    import torch  # torch: heavy, loaded only where the check runs

    if device == "cpu":
        return [torch.device("cpu")]
    problem = cuda_problem()
    if problem:
        raise CudaUnusable(problem)
    return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]


def world_size(device: str, cpu_ranks: int) -> int:
    import torch  # torch: heavy, loaded only where the check runs

    if device == "cpu":
        return cpu_ranks
    problem = cuda_problem()
    if problem:
        raise CudaUnusable(problem)
    return int(torch.cuda.device_count())


def device_name(device: str) -> str:
    import torch  # torch: heavy, loaded only where the check runs

    if device == "cuda" and torch.cuda.is_available():
        return str(torch.cuda.get_device_name(0))
    return "cpu"


def sync(device: Any) -> None:
    """Wait for the work queued on this device (not on the current device: a timer around GPU 3's
    work that synchronises GPU 0 measures kernel launches)."""
    import torch  # torch: heavy, loaded only where the check runs

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


def energy_mj(indices: list[int]) -> Mapping[int, float | None]:
    """NVML's total-energy counters (millijoules) by NVML index; {} where NVML cannot start."""
    if adapter.init():
        return {}
    return adapter.energy_mj(indices)


def gpu_models(ctx: Any) -> dict[int, str]:
    """Each GPU's model as NVML names it (no CUDA context needed), by CUDA index."""
    return {g.cuda_index: g.name for g in ctx.host.gpus if g.name and g.cuda_index is not None}


def gpu_model(ctx: Any) -> str:
    """The node's GPU model as NVML names it, else as torch names it; a node of several models is
    "mixed: A, B", which no expected figure or baseline matches (each GPU's own figures are judged
    against its own model: by_model)."""
    named = sorted(set(gpu_models(ctx).values()))
    if len(named) > 1:
        return "mixed: " + ", ".join(named)
    return named[0] if named else device_name(ctx.device)


def by_model(ctx: Any, indices: list[int], otherwise: str) -> dict[str, list[int]]:
    """These GPUs (CUDA index) grouped by the model NVML names each, `otherwise` where it named none."""
    models = gpu_models(ctx)
    groups: dict[str, list[int]] = {}
    for i in indices:
        groups.setdefault(models.get(i, otherwise), []).append(i)
    return groups


@dataclass(frozen=True)
class FigureVerdict:
    figure: str  # "models.cv_images_per_s"
    gpu_index: int | None  # None for a per-node figure
    value: float
    expected: float | None
    verdict: str  # "pass" | "warn" | "fail" | "none" (no baseline)
    unit: str
    gpu_name: str

    def text(self, gpu: Any = None) -> str:
        where = f"{gpu.label()}: " if gpu is not None else ""
        return f"{where}{self.figure} {self.value:g} {self.unit} vs {self.expected:g} expected on {self.gpu_name}"


def judge_figures(check: str, metrics: dict[str, Any], ctx: Any, *, gpus: int) -> list[FigureVerdict]:
    """Every registered figure of this check in `metrics`, judged against the baseline for its GPU's
    own model (a per-node figure: the node's) and GPU count (the `figures` table; --baseline overrides it)."""
    baselines = load_baselines(path_or_none(ctx.baseline))
    return verdicts(check, metrics, baselines, gpu_model(ctx), gpus, models=gpu_models(ctx))


def verdicts(
    check: str,
    metrics: dict[str, Any],
    baselines: Any,
    gpu_name: str,
    gpus: int,
    *,
    models: dict[int, str] | None = None,
) -> list[FigureVerdict]:
    """Pure: `judge_figures` with the baselines given; `models` names a GPU's own model by index
    (`gpu_name` for the node's figures and a GPU it does not name)."""
    out = []
    for r in readings([{"name": check, "metrics": metrics}]):
        name = (models or {}).get(r.gpu_index, gpu_name) if r.gpu_index is not None else gpu_name
        expected = baselines.expected_figure(r.figure.name, name, gpus)
        verdict = baselines.judge(r.value, expected, r.figure.better) if expected is not None else "none"
        out.append(FigureVerdict(r.figure.name, r.gpu_index, r.value, expected, verdict, r.figure.unit, name))
    return out
