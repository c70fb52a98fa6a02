"""CPU: torch's +cpu wheels, for a machine without a GPU, on the OS's own image; no driver."""

from __future__ import annotations

from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.base import Halves
from gpuenv.platforms.cpu.host import CpuHost
from gpuenv.platforms.cpu.image import CpuImage
from gpuenv.platforms.cpu.resolve import CpuResolve
from gpuenv.types import CpuArch, PlatformName

NAME: PlatformName = "cpu"
CPU_ARCHES: tuple[CpuArch, ...] = ("x86_64", "aarch64")  # torch publishes +cpu wheels for both


def platform(arch: CpuArchFacts) -> Halves[CpuResolve, CpuImage, CpuHost]:
    return Halves(NAME, "CPU", arch, CpuResolve(arch), CpuImage(), CpuHost())
