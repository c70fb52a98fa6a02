"""What the gather pass found on a host, as typed facts: pure, from the dict playbooks/gather.yml sets.

The OS becomes a knowledge-base OS name (debian12, ubuntu22.04, rockylinux9) through the OS rows'
Ansible names (`KnowledgeBase.os_for_host`), each NVIDIA GPU on
the PCI bus a model and compute capability through the device-id table (`compat.gpu_by_pci_id`),
each AMD GPU a model and gfx target through the knowledge base's AMD GPUs (`compat.amd_gpu_by_pci_id`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuenv.compat import KnowledgeBase, amd_gpu_by_pci_id, gpu_by_pci_id
from gpuenv.provision.amdgpus import AMD_VENDOR, NVIDIA_VENDOR

ARCHITECTURES = ("x86_64", "aarch64")  # what NVIDIA ships drivers for
_PYTHON = re.compile(r"python(3\.\d{1,2})")
_DRIVER = re.compile(r"\d{3}(\.\d{1,3}){1,2}")
_AMDGPU = re.compile(r"\d{1,2}\.\d{1,3}(\.\d{1,3}){0,2}")  # AMD's DKMS amdgpu, "6.12.12"


@dataclass(frozen=True)
class HostGpu:
    device_id: str  # PCI device id under its vendor: "2330" (NVIDIA), "74a1" (AMD)
    name: str  # lspci's name, or "NVIDIA device 10de:2330"
    model: str | None  # the knowledge base's GPU name ("H100", "MI300X"); None: not in the device-id table
    sm: str | None  # compute capability, "9.0"; None for AMD GPUs
    vendor: str = NVIDIA_VENDOR  # PCI vendor id: "10de" or "1002"
    gfx: str | None = None  # an AMD GPU's architecture, "gfx942"

    @property
    def is_amd(self) -> bool:
        return self.vendor == AMD_VENDOR

    @property
    def label(self) -> str:
        """'H100 (sm_90)', 'MI300X (gfx942)', 'unknown 10de:2330'."""
        if self.is_amd:
            return f"{self.model} ({self.gfx})" if self.model else f"unknown {AMD_VENDOR}:{self.device_id}"
        return (
            f"{self.model} (sm_{self.sm.replace('.', '')})"
            if self.model and self.sm
            else f"unknown 10de:{self.device_id}"
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"device_id": self.device_id, "name": self.name, "model": self.model, "sm": self.sm}
        return {**out, "vendor": self.vendor, "gfx": self.gfx} if self.is_amd else out


@dataclass(frozen=True)
class HostFacts:
    host: str
    distribution: str  # as Ansible names it: "Debian", "Ubuntu", "Rocky"
    version: str  # "12", "22.04", "9.4"
    os: str | None  # the knowledge base's name; None: not an OS gpuenv provisions
    architecture: str
    kernel: str
    headers: bool  # headers of the running kernel are installed
    gpus: tuple[HostGpu, ...] = ()
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

    @property
    def amd_gpus(self) -> tuple[HostGpu, ...]:
        return tuple(g for g in self.gpus if g.is_amd)

    @property
    def nvidia_gpus(self) -> tuple[HostGpu, ...]:
        return tuple(g for g in self.gpus if not g.is_amd)

    def gpu_label(self, gpus: tuple[HostGpu, ...] | None = None) -> str:
        """'no NVIDIA GPU', '8× H100 (sm_90)' or '8× MI300X (gfx942)', models counted."""
        chosen = self.gpus if gpus is None else gpus
        if not chosen:
            return "no NVIDIA GPU"
        counts: dict[str, int] = {}
        for g in chosen:
            counts[g.label] = counts.get(g.label, 0) + 1
        return ", ".join(f"{n}× {label}" for label, n in counts.items())

    def to_dict(self) -> dict[str, Any]:
        return {
            "os": self.os_label,
            "architecture": self.architecture,
            "kernel": self.kernel,
            "kernel_headers": self.headers,
            "gpus": [g.to_dict() for g in self.gpus],
            "nvswitches": self.nvswitch_count,
            "driver": self.driver,
            **({"amdgpu": self.amdgpu} if self.amd_gpus else {}),
            "secure_boot": self.secure_boot,
            "free_gb": self.free_gb,
            "pythons": list(self.pythons),
        }


def facts_from_gathered(host: str, raw: dict[str, Any], kb: KnowledgeBase) -> HostFacts:
    """HostFacts from one host's gpuenv_host_facts; values the host sent are input: checked, never trusted."""
    distribution, version = str(raw.get("distribution", "")), str(raw.get("distribution_version", ""))
    known = kb.os_for_host(distribution, version)
    devices = [d for d in raw.get("devices") or [] if isinstance(d, dict)]
    driver = str(raw.get("driver") or "").strip()
    amdgpu = str(raw.get("amdgpu") or "").strip()
    free_kb = str(raw.get("free_kb") or "0").strip()
    return HostFacts(
        host=host,
        distribution=distribution,
        version=version,
        os=known.name if known else None,
        architecture=str(raw.get("architecture", "")),
        kernel=str(raw.get("kernel", "")),
        headers=bool(raw.get("headers")),
        gpus=tuple(_gpu(kb, d) for d in devices if d.get("kind") == "gpu"),
        nvswitch_count=sum(1 for d in devices if d.get("kind") == "nvswitch"),
        driver=driver if _DRIVER.fullmatch(driver) else None,
        amdgpu=amdgpu if _AMDGPU.fullmatch(amdgpu) else None,
        secure_boot=str(raw.get("secure_boot", "unknown")),
        free_gb=round(int(free_kb) / 1048576, 1) if free_kb.isdigit() else 0.0,
        pythons=tuple(sorted({m.group(1) for p in raw.get("pythons") or [] if (m := _PYTHON.fullmatch(str(p)))})),
        is_controller=bool(raw.get("is_controller")),
    )


def _gpu(kb: KnowledgeBase, device: dict[str, Any]) -> HostGpu:
    device_id = str(device.get("device_id", "")).lower()
    if str(device.get("vendor") or NVIDIA_VENDOR).lower() == AMD_VENDOR:
        amd = amd_gpu_by_pci_id(kb, device_id)
        name = str(device.get("name") or f"AMD device {AMD_VENDOR}:{device_id}")
        return HostGpu(device_id, name, amd.name if amd else None, None, AMD_VENDOR, amd.gfx if amd else None)
    known = gpu_by_pci_id(kb, device_id)
    name = str(device.get("name") or f"NVIDIA device 10de:{device_id}")
    return HostGpu(device_id, name, known.gpu.name if known else None, known.sm if known else None)
