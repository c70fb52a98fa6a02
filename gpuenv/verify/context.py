"""What a check gets to work with inside the verify worker."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuenv.verify.facts import HostFacts
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
    host: HostFacts = field(default_factory=HostFacts)
    placement: dict[str, Any] | None = None  # a run across nodes (gpuenv.verify.launch.Placement)
    limit_s: float | None = None  # the running check's time limit (the engine's watchdog kills at it)
    # What checks hand on (the stack found), by the names their CheckSpec.provides declares.
    provided: dict[str, Any] = field(default_factory=dict)

    @property
    def cpu_ranks(self) -> int:
        return 2

    def gpu_ref(self, index: int) -> GpuRef:
        """The GPU as this process sees it (CUDA index), with its UUID and bus id when known."""
        return self.host.gpu_ref(index)

    def artifacts(self) -> Path | None:
        if not self.artifacts_dir:
            return None
        path = Path(self.artifacts_dir)
        path.mkdir(parents=True, exist_ok=True)
        return path
