"""ROCm's Platform, its four halves built for one CPU architecture (gpuenv.platforms.registry)."""

from __future__ import annotations

from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.base import Halves
from gpuenv.platforms.rocm import CPU_ARCHES, CPU_ARCHES_WHY, NAME
from gpuenv.platforms.rocm.host import RocmHost
from gpuenv.platforms.rocm.image import RocmImage
from gpuenv.platforms.rocm.node import NODE
from gpuenv.platforms.rocm.resolve import RocmResolve

__all__ = ["CPU_ARCHES", "CPU_ARCHES_WHY", "NAME", "platform"]


def platform(arch: CpuArchFacts) -> Halves[RocmResolve, RocmImage, RocmHost]:
    return Halves(NAME, "ROCm", arch, RocmResolve(arch), RocmImage(), RocmHost(), NODE)
