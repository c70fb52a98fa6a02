"""What the engine knows about the host before any check runs, as typed values.

The engine probes NVML in a helper process (never CUDA), AMD SMI where NVML cannot name the GPUs,
and reads the PCI bus; every check gets the result as `HostFacts`, whether or not the nvml check
runs. Checks read these fields, never free-form keys. Everything here crosses a process boundary
as JSON (`to_dict` / `from_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from gpuenv.platforms import nodes
from gpuenv.types import Smi
from gpuenv.verify.model import GpuRef

PciScope = Literal["host", "container", "job"]
SMI_NAMES: dict[str, str] = {n.smi: n.library for n in nodes.GPU_NODES}


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
    gfx: str | None = None  # AMD's target ("gfx942"); NVIDIA GPUs have a compute capability instead

    def ref(self) -> GpuRef:
        return GpuRef(self.index, self.uuid, self.pci_bus_id)


@dataclass(frozen=True)
class NvmlSnapshot:
    """Everything the nvml check judges: driver versions and one reading per GPU (NVML order), and
    what the node-level calls (driver version, GPU count) could not read (`unread`)."""

    driver: str | None
    cuda_driver: str | None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    unread: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NvmlSnapshot:
        return cls(
            data.get("driver"), data.get("cuda_driver"), list(data.get("gpus", [])), dict(data.get("unread", {}))
        )

    def to_dict(self) -> dict[str, Any]:
        """As the report keeps it (no copy: the readings are plain JSON data already)."""
        return {"driver": self.driver, "cuda_driver": self.cuda_driver, "gpus": self.gpus, "unread": self.unread}


@dataclass(frozen=True)
class HostFacts:
    nvml: str = "not probed"  # "ok", or why the management library (`smi`) could not be read
    smi: Smi = "nvml"
    driver: str | None = None
    cuda_driver: str | None = None
    gpus: tuple[GpuInfo, ...] = ()  # the GPUs this process may use, in CUDA order
    pci_nvidia: tuple[str, ...] = ()  # NVIDIA GPUs on the PCI bus (sysfs: the host's whole bus)
    pci_amd: tuple[str, ...] = ()  # AMD GPUs on the PCI bus
    # The bus ids NVML must see here (None: cannot be judged in this scope, see pci_note).
    pci_reference: tuple[str, ...] | None = None
    pci_scope: PciScope = "host"
    nvml_init_s: float | None = None  # how long the probe's first nvmlInit took (slow: persistence off)

    def gpu_ref(self, cuda_index: int) -> GpuRef:
        """The GPU with this CUDA index, with its UUID and bus id when NVML named it."""
        for gpu in self.gpus:
            if gpu.cuda_index == cuda_index:
                return GpuRef(cuda_index, gpu.uuid, gpu.pci_bus_id)
        return GpuRef(cuda_index)

    @property
    def loaded(self) -> bool:
        """Whether the management library started and named the GPUs."""
        return self.nvml == "ok"

    def on_bus(self) -> tuple[str, ...]:
        """The bus ids of the management library's own vendor's GPUs on the PCI bus."""
        found: tuple[str, ...] = getattr(self, nodes.for_smi(self.smi).bus_field)
        return found

    def nvml_index(self, cuda_index: int) -> int:
        return next((g.index for g in self.gpus if g.cuda_index == cuda_index), cuda_index)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostFacts:
        reference = data.get("pci_reference")
        return cls(
            nvml=data.get("nvml", "not probed"),
            smi=data.get("smi", "nvml"),
            driver=data.get("driver"),
            cuda_driver=data.get("cuda_driver"),
            gpus=tuple(GpuInfo(**g) for g in data.get("gpus", [])),
            pci_nvidia=tuple(data.get("pci_nvidia", [])),
            pci_amd=tuple(data.get("pci_amd", [])),
            pci_reference=None if reference is None else tuple(reference),
            pci_scope=data.get("pci_scope", "host"),
            nvml_init_s=data.get("nvml_init_s"),
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
    keys = ("cuda_index", "name", "uuid", "serial", "pci_bus_id", "compute_capability", "gfx")
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


def visible_spec(smi: str, gpus: list[dict[str, Any]], environ: Mapping[str, str]) -> str | None:
    """The CUDA_VISIBLE_DEVICES-style list of the GPUs this process may use, as the node's platform reads
    its own variables (gpuenv.platforms.node)."""
    return nodes.for_smi(smi).visible(gpus, environ)


def loads(probe: Mapping[str, Any]) -> bool:
    """Whether a probe's management library started and named the GPUs (its "nvml" key: a wire name)."""
    return probe.get("nvml") == "ok"


def bus_fields(buses: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """The GPUs on the PCI bus by management library (gpuenv.verify.pci.buses_on_pci) as host_facts' arguments."""
    return {n.bus_field: buses.get(n.smi, []) for n in nodes.GPU_NODES}


def host_facts(
    probe: dict[str, Any],
    *,
    pci_nvidia: list[str],
    pci_amd: list[str],
    driver_gpus: list[str] | None,
    scope: PciScope,
    environ: Mapping[str, str],
) -> HostFacts:
    """Pure: the engine's facts from the chosen probe's answer and the PCI bus. The bus ids the
    management library must see are its own vendor's (AMD has no driver list for containers)."""
    node = nodes.for_smi(probe.get("smi", ""))
    buses = {"pci_nvidia": tuple(pci_nvidia), "pci_amd": tuple(pci_amd)}  # HostFacts' fields, report wire names
    reference, _why = bus_reference(list(buses[node.bus_field]), driver_gpus if node.driver_lists_gpus else None, scope)
    found = probe.get("gpus", [])
    return HostFacts(
        nvml=probe["nvml"],
        smi=node.smi,
        driver=probe.get("driver"),
        cuda_driver=probe.get("cuda_driver"),
        gpus=gpu_infos(found, node.visible(found, environ)),
        **buses,
        pci_reference=reference,
        pci_scope=scope,
        nvml_init_s=probe.get("init_s"),
    )


def gpu_node_note(host: HostFacts) -> str | None:
    """Why this is a GPU node (GPUs on the bus, or the management library loads), or None."""
    node = nodes.for_smi(host.smi)
    on_bus = host.on_bus()
    if on_bus:
        return f"{len(on_bus)} {node.vendor} GPU(s) on the PCI bus"
    return f"{node.library} loads" if host.loaded else None
