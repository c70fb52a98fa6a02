"""CPU: torch's +cpu wheels, for a machine without a GPU, on the OS's own image; no driver.

Its halves: resolve.py, image.py, host.py, node.py; halves.py builds its Platform for a CPU architecture.
This module names it alone: verify's node half (node.py) is imported without the resolver's halves.
"""

from __future__ import annotations

from gpuenv.types import CpuArch, PlatformName

NAME: PlatformName = "cpu"
CPU_ARCHES: tuple[CpuArch, ...] = ("x86_64", "aarch64")  # torch publishes +cpu wheels for both
