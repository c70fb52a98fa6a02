"""CUDA: torch's +cu wheels for NVIDIA GPUs, on nvidia/cuda images, over NVIDIA's driver."""

from __future__ import annotations

from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.base import Halves
from gpuenv.platforms.cuda.host import CudaHost
from gpuenv.platforms.cuda.image import CudaImage
from gpuenv.platforms.cuda.resolve import CudaResolve
from gpuenv.types import CpuArch, PlatformName

NAME: PlatformName = "cuda"
CPU_ARCHES: tuple[CpuArch, ...] = ("x86_64", "aarch64")  # NVIDIA ships its driver for both


def platform(arch: CpuArchFacts) -> Halves[CudaResolve, CudaImage, CudaHost]:
    return Halves(NAME, "CUDA", arch, CudaResolve(arch), CudaImage(), CudaHost())
