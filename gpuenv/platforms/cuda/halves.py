"""CUDA's Platform, its four halves built for one CPU architecture (gpuenv.platforms.registry)."""

from __future__ import annotations

from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.base import Halves
from gpuenv.platforms.cuda import CPU_ARCHES, NAME
from gpuenv.platforms.cuda.host import CudaHost
from gpuenv.platforms.cuda.image import CudaImage
from gpuenv.platforms.cuda.node import NODE
from gpuenv.platforms.cuda.resolve import CudaResolve

__all__ = ["CPU_ARCHES", "NAME", "platform"]


def platform(arch: CpuArchFacts) -> Halves[CudaResolve, CudaImage, CudaHost]:
    return Halves(NAME, "CUDA", arch, CudaResolve(arch), CudaImage(), CudaHost(), NODE)
