"""ROCm: torch's +rocm wheels for AMD Instinct GPUs, on rocm/dev images, over AMD's amdgpu driver."""

from __future__ import annotations

from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.base import Halves
from gpuenv.platforms.rocm.host import RocmHost
from gpuenv.platforms.rocm.image import RocmImage
from gpuenv.platforms.rocm.resolve import RocmResolve
from gpuenv.types import CpuArch, PlatformName

NAME: PlatformName = "rocm"
CPU_ARCHES: tuple[CpuArch, ...] = ("x86_64",)
CPU_ARCHES_WHY = "AMD ships ROCm and amdgpu-dkms, and PyTorch its +rocm wheels, for x86_64 only"  # KB source rocm-arm


def platform(arch: CpuArchFacts) -> Halves[RocmResolve, RocmImage, RocmHost]:
    return Halves(NAME, "ROCm", arch, RocmResolve(arch), RocmImage(), RocmHost())
