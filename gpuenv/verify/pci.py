"""What this process sees of the PCI bus: NVIDIA GPUs in sysfs, the GPUs the driver exposes here,
and whether that is the host's view (a container or a Slurm job slice may see fewer)."""

from __future__ import annotations

import os
from pathlib import Path

from gpuenv.verify.facts import PciScope

SYSFS_PCI = Path("/sys/bus/pci/devices")
DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")


def nvidia_on_pci(root: Path = SYSFS_PCI) -> list[str]:
    """Bus ids of NVIDIA GPUs (vendor 0x10de, class display/3D) on the PCI bus, from sysfs."""
    found: list[str] = []
    if not root.is_dir():
        return found
    for dev in sorted(root.iterdir()):
        try:
            vendor = (dev / "vendor").read_text().strip()
            klass = (dev / "class").read_text().strip()
        except OSError:
            continue
        if vendor == "0x10de" and klass.startswith("0x03"):
            found.append(dev.name)
    return found


def driver_gpus(root: Path = DRIVER_GPUS) -> list[str] | None:
    """Bus ids the NVIDIA driver exposes to this namespace (masked in containers), or None."""
    if not root.is_dir():
        return None
    return sorted(entry.name for entry in root.iterdir())


def pci_scope(root: Path = Path("/")) -> PciScope:
    """Whether this process sees the host's GPUs: a container or a Slurm job slice may not."""
    if (root / ".dockerenv").exists() or (root / "run/.containerenv").exists() or os.environ.get("container"):  # noqa: SIM112 (systemd's name)
        return "container"
    try:
        cgroup = (root / "proc/self/cgroup").read_text()
    except OSError:
        cgroup = ""
    if os.environ.get("SLURM_JOB_ID") and "/job_" in cgroup:
        return "job"
    return "host"
