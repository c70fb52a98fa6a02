"""CPU's Platform, its four halves built for one CPU architecture (gpuenv.platforms.registry)."""

from __future__ import annotations

from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.base import Halves
from gpuenv.platforms.cpu import CPU_ARCHES, NAME
from gpuenv.platforms.cpu.host import CpuHost
from gpuenv.platforms.cpu.image import CpuImage
from gpuenv.platforms.cpu.node import NODE
from gpuenv.platforms.cpu.resolve import CpuResolve

__all__ = ["CPU_ARCHES", "NAME", "platform"]


def platform(arch: CpuArchFacts) -> Halves[CpuResolve, CpuImage, CpuHost]:
    return Halves(NAME, "CPU", arch, CpuResolve(arch), CpuImage(), CpuHost(), NODE)
