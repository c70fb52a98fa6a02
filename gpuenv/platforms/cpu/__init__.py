"""CPU: torch's +cpu wheels, for a machine without a GPU, on the OS's own image; no driver."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.cpu.host import CpuHost
from gpuenv.platforms.cpu.image import CpuImage
from gpuenv.platforms.cpu.resolve import CpuResolve
from gpuenv.types import CpuArch, PlatformName

NAME: PlatformName = "cpu"
CPU_ARCHES: tuple[CpuArch, ...] = ("x86_64", "aarch64")  # torch publishes +cpu wheels for both


@dataclass(frozen=True)
class CpuPlatform:
    cpu_arch: CpuArchFacts
    resolver: CpuResolve
    name: PlatformName = NAME
    label: str = "CPU"
    image: CpuImage = field(default_factory=CpuImage)
    host: CpuHost = field(default_factory=CpuHost)


def platform(arch: CpuArchFacts) -> CpuPlatform:
    return CpuPlatform(arch, CpuResolve(arch))
