"""The node half of a platform: what `verify`, `tune power` and the Slurm hooks need of a node's GPUs —
which management library reads them (gpuenv.adapters.management), which variables pick the GPUs a
process may use, where its GPUs show on the PCI bus, what its health rules read (its XID watch, its
policy's wording) and the words its own tools use in hints.

A platform with GPUs answers a `GpuNode`; one without (CPU) answers `Unsupported`. This module and
the platforms' node.py modules import neither the knowledge base nor the resolver: `verify --passive`
takes its node half through gpuenv.platforms.nodes without them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuenv.errors import BadRequest
from gpuenv.types import Smi

if TYPE_CHECKING:  # the Protocol the adapters are held to, an annotation only: off verify --passive's path
    from gpuenv.adapters.management import GpuManagement

Gpus = list[dict[str, Any]]


class Unsupported(NamedTuple):
    """What a platform answers for a feature it lacks: the reason, said to the user, and what to do instead."""

    reason: str
    hint: str

    def refuse(self) -> BadRequest:
        return BadRequest(self.reason, hint=self.hint)


@dataclass(frozen=True)
class GpuNode:
    """A platform's GPUs as a node shows them, and the library that manages them."""

    smi: Smi  # the library's wire name: verify's host facts, the health check's `smi` metric
    library: str  # "NVML", "AMD SMI"
    vendor: str  # "NVIDIA", "AMD"
    management: GpuManagement  # the adapter: gpuenv.adapters.nvml, gpuenv.adapters.amdsmi
    pci_vendor: str  # "10de": its GPUs on the PCI bus
    bus_field: str  # verify's HostFacts field (a report wire name) that lists its GPUs on the bus
    probe_op: str  # the worker's op that probes the library in a helper process
    watches_xids: bool  # whether its probe keeps watching for the driver's XID events
    driver_lists_gpus: bool  # whether the driver lists the GPUs a container was given (the bus reference)
    runtime: str  # what torch's "cuda" device runs on here
    devices_variables: str  # the variables that pick a process's GPUs, in words
    job_variables: tuple[str, ...]  # a Slurm job's GPUs: the variable verify sets, then the ones it removes
    visible_by_position: bool  # whether those variables pick by position among every GPU, not by the library's index
    visible: Callable[[Gpus, Mapping[str, str]], str | None]  # those variables as a CUDA_VISIBLE_DEVICES-style list
    torch_build: Callable[[Any], str | None]  # torch's build for it, from `torch.version` ("CUDA 12.8"), or None
    torch_arch: Callable[[Any, Any], str | None]  # (torch, device): the GPU's code beside its capability ("gfx942")
    list_hint: str  # its command that lists the GPUs with their indices
    driver_hint: str  # what to install where its library is there but cannot start on a GPU node
    install_hint: str  # what to install where gpuenv lacks the library's bindings
    power_hints: tuple[str, str]  # its commands that show and set one GPU's power limit
    power_floor_share: float | None  # where the library names no floor: the share of the default tried lowest
    energy_counter: str  # what the library calls a GPU's energy counter
    policy_overlay: str | None  # the data file laid over the health policy: its remediations, limits, wording


NodeHalf = GpuNode | Unsupported
