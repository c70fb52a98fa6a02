"""The ROCm releases a spelling names, and the OSes of a release: where AMD supports it (the knowledge
base's `rocm[].os`), and where gpuenv provisions it: the host OSes the amdgpu role implements (its apt and
dnf repositories of AMD's; no Debian, whose amdgpu repository layout the role does not know). A Rocky Linux
release is served where AMD lists RHEL of its major, whose packages install on it (binary-compatible) — one
rule, for resolve and provision. Pure.
"""

from __future__ import annotations

from gpuenv.kb import KnowledgeBase, OsInfo, RocmRelease

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


def releases_named(kb: KnowledgeBase, rocm: str) -> tuple[RocmRelease, ...]:
    """The ROCm releases `rocm` names: the build of that exact version ("6.2.4" is rocm6.2.4, not rocm6.2),
    else any whose release or minor it names ("6.4.1" is rocm6.4; "rocm7.0" is 7.0)."""
    exact = tuple(r for r in kb.rocm if rocm.lower().removeprefix("rocm") == r.version)
    return exact or tuple(r for r in kb.rocm if r.names(rocm))


def _release(kb: KnowledgeBase, rocm: str) -> RocmRelease | None:
    return next(iter(releases_named(kb, rocm)), None)


def rocm_os_row(rocm: RocmRelease, os_info: OsInfo) -> str | None:
    """The OS of AMD's compatibility matrix that serves `os_info` for this ROCm release: its own name, or for
    a RHEL-family OS of major N (Rocky Linux) AMD's rhelN, whose packages install on it (binary-compatible).
    None: AMD supports the release on no such OS."""
    if os_info.name in rocm.os:
        return os_info.name
    rhel = f"rhel{os_info.version.split('.')[0]}"
    return rhel if os_info.family == "rhel" and rhel in rocm.os else None


def rocm_os_warning(rocm: RocmRelease, os_info: OsInfo) -> str | None:
    """The warning a ROCm stack carries when AMD lists its OS under another name (Rocky Linux as RHEL)."""
    row = rocm_os_row(rocm, os_info)
    if row is None or row == os_info.name:
        return None
    return (
        f"AMD lists ROCm {rocm.version} for RHEL {row.removeprefix('rhel')}, not {os_info.name}: "
        f"gpuenv serves it as RHEL-compatible (AMD's RHEL packages install on it), untested by AMD"
    )
