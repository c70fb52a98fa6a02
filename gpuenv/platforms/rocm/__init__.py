"""ROCm: torch's +rocm wheels for AMD Instinct GPUs, on rocm/dev images, over AMD's amdgpu driver.

Its halves: resolve.py, image.py, host.py, node.py; halves.py builds its Platform for a CPU architecture.
This module names it alone: verify's node half (node.py) is imported without the resolver's halves.
"""

from __future__ import annotations

from gpuenv.types import CpuArch, PlatformName

NAME: PlatformName = "rocm"
CPU_ARCHES: tuple[CpuArch, ...] = ("x86_64",)
CPU_ARCHES_WHY = "AMD ships ROCm and amdgpu-dkms, and PyTorch its +rocm wheels, for x86_64 only"  # KB source rocm-arm
