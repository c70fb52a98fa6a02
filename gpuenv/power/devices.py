"""Which library sets this node's power limits for `gpuenv tune power`: the management library of the
node's platform (gpuenv.platforms.nodes: NVML on an NVIDIA node, AMD SMI's power cap on an AMD one),
behind one face (gpuenv.adapters.management), with the words each vendor's tools use in a hint.

The libraries are tried in the platforms' order: the first that can be used. Neither: CannotRun (exit 3)
with the reason of the vendor whose GPUs are on the PCI bus (or whose library is installed but fails),
and the install that vendor needs (never the other's); with no GPU on the bus, that there is nothing to tune.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuenv.errors import CannotRun
from gpuenv.platforms import nodes
from gpuenv.platforms.node import GpuNode
from gpuenv.verify.pci import vendor_on_pci


@dataclass(frozen=True)
class PowerControl:
    node: GpuNode

    @property
    def library(self) -> str:  # "NVML" | "AMD SMI"
        return self.node.library

    @property
    def smi(self) -> str:  # verify's name for it, and the workload's energy reader
        return self.node.smi

    @property
    def failed(self) -> type[Exception]:  # what a call that must succeed raises (with a `reason`)
        return self.node.management.CallFailed

    @property
    def show_hint(self) -> str:  # the vendor's command that shows what a GPU allows
        return self.node.power_hints[0]

    @property
    def set_hint(self) -> str:  # the vendor's command that sets one GPU's limit by hand
        return self.node.power_hints[1]

    def power_limits(self) -> list[dict[str, Any]]:
        return [_with_floor(g, self.node.power_floor_share) for g in self.node.management.power_limits()]

    def power_limit_mw(self, index: int) -> int:
        return int(self.node.management.power_limit_mw(index))

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None:
        self.node.management.set_power_limit_mw(index, milliwatts)


def _with_floor(gpu: dict[str, Any], share: float | None) -> dict[str, Any]:
    """Where the library names no floor (a minimum of 0), the platform's share of the default as the lowest cap."""
    default = gpu.get("default_mw") or gpu.get("max_mw")
    if share is None or gpu.get("min_mw") or not default:
        return gpu
    return {**gpu, "min_mw": round(default * share)}


def open_control() -> PowerControl:
    """The power control of this node's GPUs, initialised; CannotRun where no library can be used."""
    problems: dict[str, str] = {}
    for node in nodes.GPU_NODES:
        problem = node.management.init()
        if not problem:
            return PowerControl(node)
        problems[node.smi] = problem
    # the reason that matters: a library installed that fails, else the one whose GPUs are on the bus
    for node in reversed(nodes.GPU_NODES):
        problem = problems[node.smi]
        if not node.management.missing(problem) or vendor_on_pci(node.pci_vendor):
            hint = node.install_hint if "not installed" in problem else node.driver_hint  # the bindings, or the driver
            raise CannotRun(f"{node.library} cannot be used here: {problem}", hint=hint)
    first = nodes.GPU_NODES[0]
    raise CannotRun(
        f"this node has no GPU to tune: none on the PCI bus ({first.library}: {problems[first.smi]})",
        hint="run it on a GPU node: it steps GPUs' power limits (--device cpu moves only its workload to the CPU)",
    )
