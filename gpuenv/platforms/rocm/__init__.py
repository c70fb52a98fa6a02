"""ROCm: torch's +rocm wheels for AMD Instinct GPUs, on rocm/dev images, over AMD's amdgpu driver."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.rocm.host import RocmHost
from gpuenv.platforms.rocm.image import RocmImage
from gpuenv.platforms.rocm.resolve import RocmResolve
from gpuenv.types import CpuArch, PlatformName

NAME: PlatformName = "rocm"
CPU_ARCHES: tuple[CpuArch, ...] = ("x86_64",)  # AMD ships amdgpu-dkms and ROCm for x86_64 only


@dataclass(frozen=True)
class RocmPlatform:
    cpu_arch: CpuArchFacts
    resolver: RocmResolve
    name: PlatformName = NAME
    label: str = "ROCm"
    image: RocmImage = field(default_factory=RocmImage)
    host: RocmHost = field(default_factory=RocmHost)


def platform(arch: CpuArchFacts) -> RocmPlatform:
    return RocmPlatform(arch, RocmResolve(arch))
