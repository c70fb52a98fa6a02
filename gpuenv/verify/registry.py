"""Which checks run at which level, in which order, and under which time limit."""

from __future__ import annotations

from dataclasses import dataclass

LEVELS = ("quick", "standard", "deep")


@dataclass(frozen=True)
class CheckSpec:
    name: str
    first_level: str  # the lowest level that runs it
    timeouts: tuple[float, float, float]  # seconds at quick, standard, deep
    needs_torch: bool
    about: str

    def timeout(self, level: str) -> float:
        return self.timeouts[LEVELS.index(level)]


# Order matters: nvml first (it registers for XID events and names the GPUs), stack next.
CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec(
        "nvml",
        "quick",
        (30, 60, 120),
        False,
        "GPU health through NVML: ECC, row remapping, PCIe link, clocks, thermals, NVLink, XIDs",
    ),
    CheckSpec(
        "stack",
        "quick",
        (60, 90, 120),
        True,
        "torch and its CUDA build vs the driver and the GPUs' architectures; cuDNN, NCCL, nvcc",
    ),
    CheckSpec(
        "allreduce",
        "quick",
        (90, 300, 600),
        True,
        "exact all-reduce across all GPUs (gloo on the CPU); algbw and busbw vs baseline",
    ),
    CheckSpec(
        "amp",
        "quick",
        (90, 180, 300),
        True,
        "fp16/bf16 autocast training steps, GradScaler, DDP, per-GPU checksums, matmul TFLOP/s",
    ),
    CheckSpec("profiler", "quick", (60, 90, 120), True, "torch.profiler records CPU and CUDA activity (CUPTI works)"),
    CheckSpec("compile", "standard", (300, 300, 300), True, "torch.compile of a small function matches eager"),
    CheckSpec(
        "conv",
        "standard",
        (120, 120, 180),
        True,
        "cuDNN convolution forward/backward (benchmark mode) matches a reference",
    ),
    CheckSpec(
        "memory", "deep", (600, 600, 600), True, "most of the free GPU memory written and read back with patterns"
    ),
)
BY_NAME = {c.name: c for c in CHECKS}


def select(level: str, names: tuple[str, ...]) -> list[CheckSpec]:
    """The checks of a level, or exactly the named ones (in the catalogue's order)."""
    if names:
        return [c for c in CHECKS if c.name in names]
    upto = LEVELS.index(level)
    return [c for c in CHECKS if LEVELS.index(c.first_level) <= upto]
