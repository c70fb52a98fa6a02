"""What a check gets to work with inside the verify worker."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuenv.verify.model import GpuRef


@dataclass
class CheckContext:
    level: str
    device: str  # "cuda" | "cpu": where the workloads run
    expect_gpus: int | None = None
    artifacts_dir: str | None = None
    baseline: str | None = None
    policy: str | None = None
    kb: str | None = None
    # Facts that checks hand to the report (host GPUs, the stack found) and to later checks.
    facts: dict[str, Any] = field(default_factory=dict)
    # Worker-lived state (the NVML event set); lost if the worker is replaced.
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def cpu_ranks(self) -> int:
        return 2

    def gpu_ref(self, index: int) -> GpuRef:
        """The GPU as this process sees it (CUDA index), with its UUID and bus id when known."""
        for gpu in self.facts.get("gpus", []):
            if gpu.get("cuda_index") == index:
                return GpuRef(index, gpu.get("uuid"), gpu.get("pci_bus_id"))
        return GpuRef(index)

    def artifacts(self) -> Path | None:
        if not self.artifacts_dir:
            return None
        path = Path(self.artifacts_dir)
        path.mkdir(parents=True, exist_ok=True)
        return path


def to_plain(ctx: CheckContext) -> dict[str, Any]:
    return {k: getattr(ctx, k) for k in ("level", "device", "expect_gpus", "artifacts_dir", "baseline", "policy", "kb")}
