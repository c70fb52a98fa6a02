"""What the gather pass found on a host, as typed facts (gpuenv.provision.gathered reads them from the dict
playbooks/gather.yml sets). Pure data: each GPU was identified by its platform's host half (its PCI vendor
and device id), which also gave its label and the keys a report names its GPU code by.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuenv.types import PlatformName


@dataclass(frozen=True)
class GatheredGpu:
    device_id: str  # PCI device id under its vendor: "2330" (NVIDIA), "74a1" (AMD)
    name: str  # lspci's name, or "NVIDIA device 10de:2330"
    model: str | None  # the knowledge base's GPU name ("H100", "MI300X"); None: not in the device-id table
    code: str | None  # its GPU code: a compute capability "9.0", a gfx target "gfx942"; None: unknown
    platform: PlatformName  # whose driver and builds serve it
    label: str  # "H100 (sm_90)", "MI300X (gfx942)", "unknown 10de:2330"
    wire: tuple[tuple[str, str | None], ...] = ()  # its platform's keys in provision's JSON ("sm"; "vendor", "gfx")

    def to_dict(self) -> dict[str, Any]:
        return {
            "device_id": self.device_id,
            "name": self.name,
            "model": self.model,
            **dict(self.wire),
            "label": self.label,
        }


@dataclass(frozen=True)
class GatheredHost:
    host: str
    distribution: str  # as Ansible names it: "Debian", "Ubuntu", "Rocky"
    version: str  # "12", "22.04", "9.4"
    os: str | None  # the knowledge base's name; None: not an OS gpuenv provisions
    architecture: str
    kernel: str
    headers: bool  # headers of the running kernel are installed
    gpus: tuple[GatheredGpu, ...] = ()
    nvswitch_count: int = 0
    driver: str | None = None  # the loaded NVIDIA driver, "580.95.05"
    amdgpu: str | None = None  # the loaded amdgpu of AMD's DKMS package, "6.12.12"; None: none, or the kernel's own
    secure_boot: str = "unknown"  # enabled | disabled | unknown
    free_gb: float = 0.0
    pythons: tuple[str, ...] = ()  # the Python versions present, "3.11"
    is_controller: bool = False

    @property
    def os_label(self) -> str:
        return self.os or f"{self.distribution} {self.version}"

    def gpus_of(self, platform: PlatformName) -> tuple[GatheredGpu, ...]:
        return tuple(g for g in self.gpus if g.platform == platform)

    @property
    def platforms(self) -> tuple[PlatformName, ...]:
        """The platforms of the host's GPUs, in the order the GPUs were found."""
        return tuple(dict.fromkeys(g.platform for g in self.gpus))

    def gpu_label(self, gpus: tuple[GatheredGpu, ...] | None = None) -> str:
        """'no NVIDIA GPU', '8× H100 (sm_90)' or '8× MI300X (gfx942)', models counted."""
        chosen = self.gpus if gpus is None else gpus
        if not chosen:
            return "no NVIDIA GPU"
        counts: dict[str, int] = {}
        for g in chosen:
            counts[g.label] = counts.get(g.label, 0) + 1
        return ", ".join(f"{n}× {label}" for label, n in counts.items())

    def filter_facts(self) -> dict[str, Any]:
        """What the driver roles' filters read of the host itself; its platform adds the GPUs and the options."""
        return {
            "distribution": self.distribution.lower(),
            "distribution_version": self.version,
            "architecture": self.architecture,
            "kernel": self.kernel,
            "secure_boot": self.secure_boot,
            "is_controller": self.is_controller,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "os": self.os_label,
            "architecture": self.architecture,
            "kernel": self.kernel,
            "kernel_headers": self.headers,
            "gpus": [g.to_dict() for g in self.gpus],
            "nvswitches": self.nvswitch_count,
            "driver": self.driver,
            **({"amdgpu": self.amdgpu} if self.gpus_of("rocm") else {}),  # a wire name: AMD hosts' reports carry it
            "secure_boot": self.secure_boot,
            "free_gb": self.free_gb,
            "pythons": list(self.pythons),
        }
