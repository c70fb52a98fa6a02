"""CPU's node half: no GPU, so no management library to read."""

from __future__ import annotations

from gpuenv.platforms.node import Unsupported

NODE = Unsupported(
    "a CPU stack's node has no GPU to read",
    "verify --device cpu runs the checks on the CPU; tune power and the health check need GPUs",
)
