"""What the gather pass found on a host, as typed facts: pure, from the dict playbooks/gather.yml sets.

The OS becomes a knowledge-base OS name (debian12, ubuntu22.04, rockylinux9) through the OS rows'
Ansible names (`KnowledgeBase.os_for_host`), each NVIDIA GPU on
the PCI bus a model and compute capability through the device-id table (`compat.gpu_by_pci_id`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuenv.compat import KnowledgeBase, gpu_by_pci_id

ARCHITECTURES = ("x86_64", "aarch64")  # what NVIDIA ships drivers for
_PYTHON = re.compile(r"python(3\.\d{1,2})")
_DRIVER = re.compile(r"\d{3}(\.\d{1,3}){1,2}")


@dataclass(frozen=True)
class HostGpu:
    device_id: str  # PCI device id under 10de: "2330"
    name: str  # lspci's name, or "NVIDIA device 10de:2330"
    model: str | None  # the knowledge base's GPU name ("H100"); None: not in the device-id table
    sm: str | None  # compute capability, "9.0"


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
    secure_boot: str = "unknown"  # enabled | disabled | unknown
    free_gb: float = 0.0
    pythons: tuple[str, ...] = ()  # the Python versions present, "3.11"
    is_controller: bool = False

    @property
    def os_label(self) -> str:
        return self.os or f"{self.distribution} {self.version}"

    def gpu_label(self) -> str:
        """'no NVIDIA GPU' or '8× H100 (sm_90)', models counted."""
        if not self.gpus:
            return "no NVIDIA GPU"
        counts: dict[str, int] = {}
        for g in self.gpus:
            label = f"{g.model} (sm_{g.sm.replace('.', '')})" if g.model and g.sm else f"unknown 10de:{g.device_id}"
            counts[label] = counts.get(label, 0) + 1
        return ", ".join(f"{n}× {label}" for label, n in counts.items())

    def to_dict(self) -> dict[str, Any]:
        return {
            "os": self.os_label,
            "architecture": self.architecture,
            "kernel": self.kernel,
            "kernel_headers": self.headers,
            "gpus": [{"device_id": g.device_id, "name": g.name, "model": g.model, "sm": g.sm} for g in self.gpus],
            "nvswitches": self.nvswitch_count,
            "driver": self.driver,
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
        secure_boot=str(raw.get("secure_boot", "unknown")),
        free_gb=round(int(free_kb) / 1048576, 1) if free_kb.isdigit() else 0.0,
        pythons=tuple(sorted({m.group(1) for p in raw.get("pythons") or [] if (m := _PYTHON.fullmatch(str(p)))})),
        is_controller=bool(raw.get("is_controller")),
    )


def _gpu(kb: KnowledgeBase, device: dict[str, Any]) -> HostGpu:
    device_id = str(device.get("device_id", "")).lower()
    known = gpu_by_pci_id(kb, device_id)
    name = str(device.get("name") or f"NVIDIA device 10de:{device_id}")
    return HostGpu(device_id, name, known.gpu.name if known else None, known.sm if known else None)
