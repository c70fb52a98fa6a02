"""AMD Instinct hosts for the provision tests: a ROCm stack built by hand and gather facts of AMD GPUs.

The pinned stack is the image tests' hand-written one, a fixed input for the plan tests (test_amd_resolve.py tests the
stacks provision resolves from flags); the facts are what playbooks/gather.yml sets on an MI300X host
(PCI vendor 1002, device 74a1, class 0x120000 "processing accelerator").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuenv.kb import KnowledgeBase
from gpuenv.provision.gathered import facts_from_gathered
from gpuenv.provision.hostfacts import GatheredHost
from gpuenv.stack import Stack
from tests.build_image.rocm import mi300x_stack

MI300X = ("74a1", "120000", "AMD Instinct MI300X")
MI250X = ("740c", "038000", "AMD Instinct MI250X/MI250")
H100 = ("2330", "030200", "NVIDIA H100 SXM5 80GB")


def rocm_stack(**changes: Any) -> Stack:
    """torch 2.9.1+rocm6.4 for Ubuntu 24.04 and gfx942 (the image tests' MI300X stack); validated."""
    return replace(mi300x_stack(), **changes).validate()


def device(vendor: str, spec: tuple[str, str, str], slot: int) -> dict[str, str]:
    """One entry of preflight_devices, as the filter parses it from sysfs."""
    device_id, pci_class, name = spec
    return {"slot": f"0000:{slot:02x}:00.0", "vendor": vendor, "device_id": device_id, "class": pci_class} | {
        "kind": "gpu",
        "name": name,
        "generation": "",
    }


def host_facts(
    kb: KnowledgeBase, host: str, dist: str, version: str, *gpus: tuple[str, tuple[str, str, str]], **extra: Any
) -> GatheredHost:
    """GatheredHost of a host with these (vendor, GPU) pairs, read the way provision reads gather.yml's fact."""
    raw = {
        "distribution": dist,
        "distribution_version": version,
        "architecture": extra.pop("architecture", "x86_64"),
        "kernel": "6.8.0-45-generic",
        "headers": True,
        "devices": [device(vendor, spec, i + 16) for i, (vendor, spec) in enumerate(gpus)],
        "secure_boot": "disabled",
        "is_controller": False,
        "driver": "",
        "free_kb": "104857600",
        "pythons": ["python3.12"],
        **extra,
    }
    return facts_from_gathered(host, raw, kb)


def amd(spec: tuple[str, str, str], count: int) -> list[tuple[str, tuple[str, str, str]]]:
    return [("1002", spec)] * count


def nvidia(spec: tuple[str, str, str], count: int) -> list[tuple[str, tuple[str, str, str]]]:
    return [("10de", spec)] * count
