"""What provisioning knows of AMD Instinct hosts: the GPUs by PCI device id, and the OSes the amdgpu role serves. Pure.

The device ids are the Linux amdgpu driver's (drivers/gpu/drm/amd/amdgpu/amdgpu_drv.c) as pci.ids names
them; the playbooks' filter (playbooks/filter_plugins/gpuenv_filters.py) carries the same ids with their
gfx targets, and tests/provision keep the two agreeing. When the knowledge base carries AMD GPUs and the
OSes AMD supports per ROCm release, `amd_gpu` and `rocm_host_oses` are the two places to read them from.
"""

from __future__ import annotations

from dataclasses import dataclass

AMD_VENDOR = "1002"  # PCI vendor id of AMD's GPUs (ATI)
NVIDIA_VENDOR = "10de"
ROCM_ARCHITECTURES = ("x86_64",)  # AMD ships amdgpu-dkms and ROCm for x86_64 only


@dataclass(frozen=True)
class AmdGpu:
    model: str  # "MI300X"
    gfx: str  # the GPU architecture, "gfx942"


AMD_GPUS = {
    "738c": AmdGpu("MI100", "gfx908"),
    "7408": AmdGpu("MI250X", "gfx90a"),
    "740c": AmdGpu("MI250X", "gfx90a"),  # MI250 and MI250X share the id
    "740f": AmdGpu("MI210", "gfx90a"),
    "74a0": AmdGpu("MI300A", "gfx942"),
    "74a1": AmdGpu("MI300X", "gfx942"),
    "74a2": AmdGpu("MI308X", "gfx942"),
    "74a5": AmdGpu("MI325X", "gfx942"),
    "75a0": AmdGpu("MI350X", "gfx950"),
    "75a3": AmdGpu("MI355X", "gfx950"),
}

# The OS releases the amdgpu role implements, by Ansible's distribution (lower case): AMD documents
# amdgpu-dkms and ROCm for Ubuntu 22.04 and 24.04 and for RHEL 8 and 9 (Rocky Linux is RHEL-compatible)
# on every ROCm release from 6.2 to 6.4. Per-release support is the knowledge base's to carry.
_ROLE_OSES = {"ubuntu": ("22.04", "24.04"), "rocky": ("8", "9")}
_OS_NAMES = {"ubuntu": "Ubuntu", "rocky": "Rocky Linux"}


def amd_gpu(device_id: str) -> AmdGpu | None:
    """The Instinct GPU of a PCI device id under vendor 1002, or None."""
    return AMD_GPUS.get(device_id.lower())


def find_amd_model(name: str) -> AmdGpu | None:
    """An Instinct GPU by model name ("MI300X", "mi300x") or gfx target ("gfx942"), or None."""
    wanted = name.lower()
    return next((g for g in AMD_GPUS.values() if wanted in (g.model.lower(), g.gfx)), None)


def rocm_host_oses(rocm: str) -> dict[str, list[str]]:
    """The host OS releases gpuenv provisions a ROCm release on, as the role's amdgpu_supported reads them."""
    del rocm  # every release the role knows (6.2 to 6.4) has the same list; the knowledge base will tell them apart
    return {dist: list(versions) for dist, versions in _ROLE_OSES.items()}


def rocm_os_line(rocm: str) -> str:
    """'Ubuntu 22.04/24.04, Rocky Linux 8/9' for messages."""
    return ", ".join(f"{_OS_NAMES.get(d, d)} {'/'.join(v)}" for d, v in rocm_host_oses(rocm).items())


def rocm_serves(rocm: str, distribution: str, version: str) -> bool:
    """Whether the amdgpu role provisions ROCm `rocm` on this host (Ansible's distribution and version)."""
    versions = rocm_host_oses(rocm).get(distribution.lower(), [])
    return version in versions or version.split(".")[0] in versions
