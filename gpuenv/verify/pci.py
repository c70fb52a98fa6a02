"""What this process sees of the PCI bus: NVIDIA and AMD GPUs in sysfs, the GPUs the NVIDIA driver
exposes here, and whether that is the host's view (a container or a Slurm job slice may see fewer).

GPUENV_TEST_SYSFS_PCI (tests only) names a folder laid out as /sys/bus/pci/devices to read instead."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from gpuenv.platforms import nodes

if TYPE_CHECKING:  # a type alias only: `gpuenv info` reads the bus without loading verify's facts
    from gpuenv.verify.facts import PciScope

SYSFS_PCI = Path("/sys/bus/pci/devices")
DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")
TEST_SYSFS_ENV = "GPUENV_TEST_SYSFS_PCI"
NVIDIA, AMD = "0x10de", "0x1002"
# PCI classes a GPU shows as: display controllers (0x03xx: VGA, 3D); AMD's Instinct MI300 series
# is a processing accelerator (0x1200), the MI200 series a display controller.
GPU_CLASSES = {NVIDIA: ("0x03",), AMD: ("0x03", "0x12")}


def _sysfs(root: Path | None) -> Path:
    return root if root is not None else Path(os.environ.get(TEST_SYSFS_ENV) or SYSFS_PCI)


def nvidia_on_pci(root: Path | None = None) -> list[str]:
    """Bus ids of NVIDIA GPUs (vendor 0x10de, class display/3D) on the PCI bus, from sysfs."""
    return gpus_on_pci(NVIDIA, _sysfs(root))


def amd_on_pci(root: Path | None = None) -> list[str]:
    """Bus ids of AMD GPUs (vendor 0x1002, class display or processing accelerator), from sysfs."""
    return gpus_on_pci(AMD, _sysfs(root))


def vendor_on_pci(vendor: str) -> list[str]:
    """Bus ids of the GPUs of a PCI vendor id ("10de", "1002") on this machine's PCI bus, from sysfs."""
    key = f"0x{vendor}"
    return gpus_on_pci(key, _sysfs(None)) if key in GPU_CLASSES else []


def buses_on_pci() -> dict[str, list[str]]:
    """Each GPU platform's GPUs on the PCI bus, by the wire name of the library that manages them."""
    return {n.smi: vendor_on_pci(n.pci_vendor) for n in nodes.GPU_NODES}


def gpus_on_pci(vendor: str, root: Path) -> list[str]:
    found: list[str] = []
    if not root.is_dir():
        return found
    for dev in sorted(root.iterdir()):
        try:
            found_vendor = (dev / "vendor").read_text().strip()
            klass = (dev / "class").read_text().strip()
        except OSError:
            continue
        if found_vendor == vendor and klass.startswith(GPU_CLASSES[vendor]):
            found.append(dev.name)
    return found


def driver_gpus(root: Path = DRIVER_GPUS) -> list[str] | None:
    """Bus ids the NVIDIA driver exposes to this namespace (masked in containers), or None."""
    if not root.is_dir():
        return None
    return sorted(entry.name for entry in root.iterdir())


# Where container runtimes put a container's processes in cgroup v1 paths (and v2 without a cgroup namespace):
# Docker, containerd's CRI, Podman, LXC, Kubernetes pods.
CONTAINER_CGROUPS = ("/docker/", "/docker-", "cri-containerd-", "/libpod-", "/lxc/", "/kubepods")


def pci_scope(root: Path = Path("/")) -> PciScope:
    """Whether this process sees the host's GPUs: a container or a Slurm job slice may not. A container says so by
    Docker's or Podman's marker file, systemd's `container` variable, the variable Kubernetes sets in every pod, or
    its cgroup path."""
    try:
        cgroup = (root / "proc/self/cgroup").read_text()
    except OSError:
        cgroup = ""
    markers = (root / ".dockerenv", root / "run/.containerenv")
    if any(m.exists() for m in markers) or os.environ.get("container") or os.environ.get("KUBERNETES_SERVICE_HOST"):  # noqa: SIM112 (systemd's name)
        return "container"
    if any(c in cgroup for c in CONTAINER_CGROUPS):
        return "container"
    if os.environ.get("SLURM_JOB_ID") and "/job_" in cgroup:
        return "job"
    return "host"


def bus_key(bus_id: str | None) -> str:
    """A PCI address as domain:bus:device, whatever the domain's width, with or without the
    function: NVML's 00000000:18:00.0, sysfs's 0000:18:00.0 and 0000:18:00 are one key ("" for none)."""
    parts = (bus_id or "").lower().split(".")[0].split(":")
    try:
        domain, bus, device = (int(p, 16) for p in parts)
    except ValueError:
        return ""
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def same_bus(one: str | None, other: str | None) -> bool:
    key = bus_key(one)
    return bool(key) and key == bus_key(other)
