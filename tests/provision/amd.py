"""AMD Instinct hosts for the provision tests: a ROCm stack built by hand and gather facts of AMD GPUs.

The pinned stack is written out by hand, a fixed input for the plan tests (test_amd_resolve.py tests the
stacks provision resolves from flags); the facts are what playbooks/gather.yml sets on an MI300X host
(PCI vendor 1002, device 74a1, class 0x120000 "processing accelerator").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuenv.compat import KnowledgeBase
from gpuenv.provision.hostfacts import HostFacts, facts_from_gathered
from gpuenv.stack import PythonSource, Stack

MI300X = ("74a1", "120000", "AMD Instinct MI300X")
MI250X = ("740c", "038000", "AMD Instinct MI250X/MI250")
H100 = ("2330", "030200", "NVIDIA H100 SXM5 80GB")


def rocm_stack(**changes: Any) -> Stack:
    """torch 2.9.1+rocm6.4 for Ubuntu 24.04 and gfx942, as the ROCm stack contract shapes it; validated."""
    stack = Stack(
        torch="2.9.1",
        torchvision="0.24.1",
        torchaudio="2.9.1",
        cuda="none",
        cuda_build="rocm6.4",
        cudnn=None,
        python="3.12",
        python_source=PythonSource("os", ("python3.12", "python3.12-venv", "python3.12-dev"), "Ubuntu 24.04's own"),
        os="ubuntu24.04",
        base_images={
            "runtime": "rocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.9.1",
            "devel": "rocm/dev-ubuntu-24.04:6.4",
        },
        index_url="https://download.pytorch.org/whl/rocm6.4",
        numpy="numpy>=1.26",
        driver_min="none",
        driver_floor="none",
        driver_branch="amdgpu-6.4",
        gpu_sm=None,
        arch_list="gfx942",
        base_image_eol=False,
        rocm="6.4",
        gpu_gfx="gfx942",
    )
    return replace(stack, **changes).validate()


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
) -> HostFacts:
    """HostFacts of a host with these (vendor, GPU) pairs, read the way provision reads gather.yml's fact."""
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
