"""The node halves of the platforms with GPUs, in the order a node's management libraries are probed,
and the only dispatch to them for verify, tune power and the Slurm hooks. Light on purpose: it
imports the adapters and the platforms' node.py modules, never the knowledge base or the resolver
(gpuenv.platforms.registry builds each Platform with the same node half)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gpuenv.platforms.cuda import node as cuda
from gpuenv.platforms.node import GpuNode as GpuNode
from gpuenv.platforms.rocm import node as rocm

GPU_NODES: tuple[GpuNode, ...] = (cuda.NODE, rocm.NODE)  # NVML first: its probe watches XIDs
Answer = TypeVar("Answer")


def for_smi(smi: str) -> GpuNode:
    """The node half whose management library has this wire name (the first's for an unknown one)."""
    return next((n for n in GPU_NODES if n.smi == smi), GPU_NODES[0])


def on_bus(buses: Mapping[str, list[str]]) -> GpuNode:
    """The node half of the first platform whose GPUs are on the PCI bus (`buses`, by smi); the first's with none."""
    return next((n for n in GPU_NODES if buses.get(n.smi)), GPU_NODES[0])


def for_torch(version: Any) -> GpuNode | None:
    """The node half whose GPUs this torch build (`torch.version`) runs on; None: a CPU build."""
    return next((n for n in GPU_NODES if n.torch_build(version)), None)


def torch_build(version: Any) -> str | None:
    """What GPU build torch is, in words ("CUDA 12.8", "ROCm (HIP 6.4.43482)"); None: a CPU build."""
    node = for_torch(version)
    return node.torch_build(version) if node else None


def probed(
    probe: Callable[[GpuNode], Answer], loads: Callable[[Answer], bool], buses: Mapping[str, list[str]]
) -> tuple[GpuNode, Answer]:
    """Which library names the host, probing each in turn (`probe` is called only as far as needed):
    the first that loads; else the last whose vendor's GPUs are on the bus (`buses`, by smi) once no
    later vendor's are (its reason is the one that matters); else the first's answer."""
    answers: list[tuple[GpuNode, Answer]] = []
    for i, node in enumerate(GPU_NODES):
        answer = probe(node)
        answers.append((node, answer))
        later_on_bus = any(buses.get(n.smi) for n in GPU_NODES[i + 1 :])
        if loads(answer) or (buses.get(node.smi) and not later_on_bus):
            return node, answer
    return answers[0]
