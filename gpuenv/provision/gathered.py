"""What the gather pass found on a host, read from the dict playbooks/gather.yml sets. Pure.

The OS becomes a knowledge-base OS name (debian12, ubuntu22.04, rockylinux9) through the OS rows'
Ansible names (`KnowledgeBase.os_for_host`); each GPU on the PCI bus is identified by the platform
whose PCI vendor id it carries (`gpu_of`): its model and GPU code through the
knowledge base's device-id tables.
"""

from __future__ import annotations

import re
from typing import Any

from gpuenv.kb import KnowledgeBase
from gpuenv.platforms.registry import DEFAULT_PLATFORM, named, platforms
from gpuenv.provision.hostfacts import GatheredGpu, GatheredHost

_PYTHON = re.compile(r"python(3\.\d{1,2})")
_DRIVER = re.compile(r"\d{3}(\.\d{1,3}){1,2}")
_AMDGPU = re.compile(r"\d{1,2}\.\d{1,3}(\.\d{1,3}){0,2}")  # AMD's DKMS amdgpu, "6.12.12"


def facts_from_gathered(host: str, raw: dict[str, Any], kb: KnowledgeBase) -> GatheredHost:
    """GatheredHost from one host's gpuenv_host_facts; values the host sent are input: checked, never trusted."""
    distribution, version = str(raw.get("distribution", "")), str(raw.get("distribution_version", ""))
    known = kb.os_for_host(distribution, version)
    devices = [d for d in raw.get("devices") or [] if isinstance(d, dict)]
    free_kb = str(raw.get("free_kb") or "0").strip()
    return GatheredHost(
        host=host,
        distribution=distribution,
        version=version,
        os=known.name if known else None,
        architecture=str(raw.get("architecture", "")),
        kernel=str(raw.get("kernel", "")),
        headers=bool(raw.get("headers")),
        gpus=tuple(gpu_of(kb, d) for d in devices if d.get("kind") == "gpu"),
        nvswitch_count=sum(1 for d in devices if d.get("kind") == "nvswitch"),
        driver=_matching(_DRIVER, raw.get("driver")),
        amdgpu=_matching(_AMDGPU, raw.get("amdgpu")),
        secure_boot=str(raw.get("secure_boot", "unknown")),
        free_gb=round(int(free_kb) / 1048576, 1) if free_kb.isdigit() else 0.0,
        pythons=tuple(sorted({m.group(1) for p in raw.get("pythons") or [] if (m := _PYTHON.fullmatch(str(p)))})),
        is_controller=bool(raw.get("is_controller")),
    )


def _matching(pattern: re.Pattern[str], value: Any) -> str | None:
    """A loaded driver's version as the host sent it, when it is one (the host's values are input)."""
    text = str(value or "").strip()
    return text if pattern.fullmatch(text) else None


def gpu_of(kb: KnowledgeBase, device: dict[str, Any]) -> GatheredGpu:
    """A GPU the gather pass found, identified by the platform of its PCI vendor (a GPU without one: CUDA's)."""
    default = named(DEFAULT_PLATFORM)
    vendor = str(device.get("vendor") or default.host.pci_vendor).lower()
    platform = next((p for p in platforms() if p.host.pci_vendor == vendor), default)
    device_id = str(device.get("device_id", "")).lower()
    found = platform.host.identify(kb, device_id)
    name = str(device.get("name") or found.name)
    return GatheredGpu(device_id, name, found.model, found.code, platform.name, found.label, found.wire)
