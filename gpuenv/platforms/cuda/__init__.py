"""CUDA: torch's +cu wheels for NVIDIA GPUs, on nvidia/cuda images, over NVIDIA's driver."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.cuda.host import CudaHost
from gpuenv.platforms.cuda.image import CudaImage
from gpuenv.platforms.cuda.resolve import CudaResolve
from gpuenv.types import CpuArch, PlatformName

NAME: PlatformName = "cuda"
CPU_ARCHES: tuple[CpuArch, ...] = ("x86_64", "aarch64")  # NVIDIA ships its driver for both


@dataclass(frozen=True)
class CudaPlatform:
    cpu_arch: CpuArchFacts
    resolver: CudaResolve
    name: PlatformName = NAME
    label: str = "CUDA"
    image: CudaImage = field(default_factory=CudaImage)
    host: CudaHost = field(default_factory=CudaHost)


def platform(arch: CpuArchFacts) -> CudaPlatform:
    return CudaPlatform(arch, CudaResolve(arch))
