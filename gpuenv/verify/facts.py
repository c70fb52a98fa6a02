"""What the engine knows about the host before any check runs, as typed values.

The engine probes NVML in a helper process (never CUDA) and reads the PCI bus; every check gets
the result as `HostFacts`, whether or not the nvml check runs. Checks read these fields, never
free-form keys. Everything here crosses a process boundary as JSON (`to_dict` / `from_dict`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from gpuenv.verify.model import GpuRef

PciScope = Literal["host", "container", "job"]


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML names it (`index`) and as this process's CUDA numbers it (`cuda_index`)."""

    index: int
    cuda_index: int | None = None
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    compute_capability: str | None = None

    def ref(self) -> GpuRef:
        return GpuRef(self.index, self.uuid, self.pci_bus_id)


@dataclass(frozen=True)
class NvmlSnapshot:
    """Everything the nvml check judges: driver versions and one reading per GPU (NVML order)."""

    driver: str | None
    cuda_driver: str | None
    gpus: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NvmlSnapshot:
        return cls(data.get("driver"), data.get("cuda_driver"), list(data.get("gpus", [])))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class HostFacts:
    nvml: str = "not probed"  # "ok", or why NVML could not be read ("library-not-found", ...)
    driver: str | None = None
    cuda_driver: str | None = None
    gpus: tuple[GpuInfo, ...] = ()  # the GPUs this process may use, in CUDA order
    pci_nvidia: tuple[str, ...] = ()  # NVIDIA GPUs on the PCI bus (sysfs: the host's whole bus)
    # The bus ids NVML must see here (None: cannot be judged in this scope, see pci_note).
    pci_reference: tuple[str, ...] | None = None
    pci_scope: PciScope = "host"

    def gpu_ref(self, cuda_index: int) -> GpuRef:
        """The GPU with this CUDA index, with its UUID and bus id when NVML named it."""
        for gpu in self.gpus:
            if gpu.cuda_index == cuda_index:
                return GpuRef(cuda_index, gpu.uuid, gpu.pci_bus_id)
        return GpuRef(cuda_index)

    def nvml_index(self, cuda_index: int) -> int:
        return next((g.index for g in self.gpus if g.cuda_index == cuda_index), cuda_index)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostFacts:
        reference = data.get("pci_reference")
        return cls(
            nvml=data.get("nvml", "not probed"),
            driver=data.get("driver"),
            cuda_driver=data.get("cuda_driver"),
            gpus=tuple(GpuInfo(**g) for g in data.get("gpus", [])),
            pci_nvidia=tuple(data.get("pci_nvidia", [])),
            pci_reference=None if reference is None else tuple(reference),
            pci_scope=data.get("pci_scope", "host"),
        )


def visible(gpus: list[dict[str, Any]], cuda_visible: str | None) -> list[dict[str, Any]]:
    """The GPUs this process may use (CUDA_VISIBLE_DEVICES by index or UUID), in CUDA order."""
    if cuda_visible is None:
        chosen = list(gpus)
    else:
        chosen = []
        for token in filter(None, (t.strip() for t in cuda_visible.split(","))):
            match = next(
                (
                    g
                    for g in gpus
                    if (token.isdigit() and g["index"] == int(token))
                    or (g.get("uuid") and str(g["uuid"]).startswith(token))
                ),
                None,
            )
            if match is None:
                break  # CUDA stops at the first invalid entry
            chosen.append(match)
    return [{**g, "cuda_index": i} for i, g in enumerate(chosen)]


def gpu_infos(gpus: list[dict[str, Any]], cuda_visible: str | None) -> tuple[GpuInfo, ...]:
    keys = ("cuda_index", "name", "uuid", "serial", "pci_bus_id", "compute_capability")
    return tuple(GpuInfo(int(g["index"]), **{k: g.get(k) for k in keys}) for g in visible(gpus, cuda_visible))


def bus_reference(
    pci_nvidia: list[str], driver_gpus: list[str] | None, scope: PciScope
) -> tuple[tuple[str, ...] | None, str]:
    """Which NVIDIA bus ids NVML must see, and why.

    sysfs is not namespaced: in a container or a job given fewer GPUs than the host, the GPUs it
    was not given are on the bus but not visible, not fallen off. In a container the driver's own
    list (/proc/driver/nvidia/gpus, masked to the container's GPUs) is the reference; where no
    such list exists the rule cannot be judged."""
    if scope == "host":
        return tuple(pci_nvidia), "every NVIDIA GPU on the PCI bus"
    if scope == "container" and driver_gpus is not None:
        return tuple(driver_gpus), "the GPUs the driver exposes to this container"
    return None, f"in a {scope}: the host's PCI bus shows GPUs this {scope} was not given; not compared"
