"""What provisioning knows of AMD Instinct hosts beyond the knowledge base: the OSes the amdgpu role implements. Pure.

The GPUs (PCI device ids, gfx targets) and the OSes AMD supports per ROCm release are the knowledge
base's (`amd_gpus`, `rocm[].os`); a Rocky Linux release is served where AMD lists RHEL of its major
(`compat.rocm_os_row`, the rule resolve uses too). The host OSes gpuenv provisions a ROCm release on
are those the knowledge base lets through and the amdgpu role implements (its apt and dnf repositories
of AMD's; no Debian, whose amdgpu repository layout the role does not know). The playbooks' filter
(playbooks/filter_plugins/gpuenv_filters.py) carries its own copy of the device ids, for hosts without
gpuenv; tests/provision keep it equal to the knowledge base's.
"""

from __future__ import annotations

from gpuenv.compat import KnowledgeBase, OsInfo, RocmRelease, rocm_os_row

AMD_VENDOR = "1002"  # PCI vendor id of AMD's GPUs (ATI)
NVIDIA_VENDOR = "10de"
ROCM_ARCHITECTURES = ("x86_64",)  # AMD ships amdgpu-dkms and ROCm for x86_64 only
# The knowledge base's host OSes the amdgpu role implements (apt suites jammy and noble; AMD's rhel8/rhel9 trees).
ROLE_OSES = ("ubuntu22.04", "ubuntu24.04", "rockylinux8", "rockylinux9")
_OS_NAMES = {"ubuntu": "Ubuntu", "rocky": "Rocky Linux"}


def rocm_host_os_rows(kb: KnowledgeBase, rocm: str) -> list[OsInfo]:
    """The host OSes gpuenv provisions ROCm `rocm` on: AMD supports it there and the role implements it."""
    release = _release(kb, rocm)
    return [
        o
        for o in kb.os
        if "host" in o.roles and o.ansible and o.name in ROLE_OSES and release and rocm_os_row(release, o)
    ]


def rocm_host_oses(kb: KnowledgeBase, rocm: str) -> dict[str, list[str]]:
    """Those OSes by Ansible's distribution (lower case) and version, as the role's amdgpu_supported reads them."""
    out: dict[str, list[str]] = {}
    for o in rocm_host_os_rows(kb, rocm):
        assert o.ansible is not None  # rocm_host_os_rows keeps only provisioned OSes
        out.setdefault(o.ansible.distribution.lower(), []).append(o.version)
    return out


def rocm_os_line(kb: KnowledgeBase, rocm: str) -> str:
    """'Ubuntu 22.04/24.04, Rocky Linux 8/9' for messages; 'no OS' when there is none."""
    oses = rocm_host_oses(kb, rocm)
    return ", ".join(f"{_OS_NAMES.get(d, d)} {'/'.join(v)}" for d, v in oses.items()) or "no OS"


def rocm_os_refusal(kb: KnowledgeBase, rocm: str, os_name: str | None, os_label: str) -> str | None:
    """Why ROCm `rocm` is not provisioned on this host's OS (AMD does not support it, or the role does not
    implement it), or None."""
    if os_name is not None and any(o.name == os_name for o in rocm_host_os_rows(kb, rocm)):
        return None
    release, os_info = _release(kb, rocm), kb.os_by_name.get(os_name or "")
    why = (
        "the amdgpu role does not implement it"
        if release and os_info and rocm_os_row(release, os_info)
        else f"AMD does not support ROCm {rocm} there"
    )
    return f"ROCm {rocm} is not provisioned on {os_label}: {why} (gpuenv provisions it on {rocm_os_line(kb, rocm)})"


def _release(kb: KnowledgeBase, rocm: str) -> RocmRelease | None:
    return next(iter(kb.rocm_matching(rocm)), None)
