"""The amdgpu driver plan: what the amdgpu role installs on an AMD Instinct host, worked out from facts alone.

A pure function of the host's facts (OS, architecture, kernel, the AMD GPUs preflight found, Secure
Boot, whether it is the control machine) and the settings (the stack's ROCm release, the OSes AMD
supports for it, whether AMD SMI is wanted), so it runs on its own (plan_driver.yml) and gpuenv feeds
it the gathered facts to show the plan before anything runs (gpuenv.provision.driverplan).
Self-contained on purpose, as gpuenv_filters.py: a rendered project runs with plain ansible-playbook.

AMD's repositories, as AMD's ROCm install guide registers them (the role's README cites the pages):
apt  https://repo.radeon.com/amdgpu/<rocm>/ubuntu <codename> main   (the kernel driver, amdgpu-dkms)
     https://repo.radeon.com/rocm/apt/<rocm> <codename> main        (ROCm user space, AMD SMI)
dnf  https://repo.radeon.com/amdgpu/<rocm>/rhel/<major.minor>/main/x86_64/
     https://repo.radeon.com/rocm/rhel<major>/<rocm>/main
signed with https://repo.radeon.com/rocm/rocm.gpg.key; apt pins origin repo.radeon.com at 600.
"""

from __future__ import annotations

from typing import Any

REPO_BASE = "https://repo.radeon.com"
KEY_URL = f"{REPO_BASE}/rocm/rocm.gpg.key"
AMD = "1002"
_CODENAMES = {"22.04": "jammy", "24.04": "noble"}
# The OS families this role implements: AMD documents amdgpu-dkms for each of these on ROCm 6.2 to 6.4
# (gpuenv writes the list for the stack's ROCm release into amdgpu_supported, from its knowledge base's
# OS support per release; this is the fallback).
SUPPORTED = {"ubuntu": ["22.04", "24.04"], "rhel": ["8", "9"]}
_RHEL_LIKE = ("rocky", "redhat", "rhel")
_ARCHITECTURES = ("x86_64",)  # AMD ships amdgpu-dkms and ROCm for x86_64 only
_MOK_STEPS = (
    "Secure Boot is enabled: the amdgpu-dkms module must be signed with a Machine Owner Key the firmware "
    "trusts. Enrol one (mokutil --import with the key DKMS signs with, /var/lib/dkms/mok.pub), reboot and "
    "confirm the enrolment at the console; or disable Secure Boot in the firmware. Then rerun with "
    "--allow-secure-boot."
)


class _Blocked(Exception):
    pass


def _os_key(distribution: str, version: str) -> tuple[str, str, str, str]:
    """(family, major or 'YY.MM', tag, release): ('ubuntu', '24.04', 'ubuntu2404', 'noble'),
    ('rhel', '9', 'rhel9', '9.4')."""
    dist = distribution.lower()
    if dist in _RHEL_LIKE:
        major = version.split(".")[0]
        return "rhel", major, f"rhel{major}", version if "." in version else f"{major}.0"
    return dist, version, f"{dist}{version.replace('.', '')}", _CODENAMES.get(version, "")


def _repos(family: str, base: str, rocm: str, release: str, major: str) -> list[dict[str, str]]:
    """AMD's two repositories of one ROCm release: the kernel driver (amdgpu) and the ROCm user space."""
    if family == "rhel":
        return [
            {"name": "amdgpu", "url": f"{base}/amdgpu/{rocm}/rhel/{release}/main/x86_64/"},
            {"name": "rocm", "url": f"{base}/rocm/rhel{major}/{rocm}/main"},
        ]
    return [
        {"name": "amdgpu", "url": f"{base}/amdgpu/{rocm}/ubuntu", "suite": release},
        {"name": "rocm", "url": f"{base}/rocm/apt/{rocm}", "suite": release},
    ]


def amdgpu_plan(facts: dict[str, Any]) -> dict[str, Any]:
    """The amdgpu decisions for one host; action is 'install', 'skip' or 'blocked'."""
    try:
        return _plan(facts)
    except _Blocked as exc:
        return {"action": "blocked", "reason": str(exc), "summary": f"blocked: {exc}"}


def _check_host(facts: dict[str, Any], family: str, version: str, rocm: str) -> None:
    supported = {k.lower(): [str(v) for v in vs] for k, vs in dict(facts.get("supported") or SUPPORTED).items()}
    for name in _RHEL_LIKE:  # the variables name the RHEL family by its Ansible distributions
        if name in supported:
            supported.setdefault("rhel", supported[name])
    if version not in supported.get(family, []):
        listed = "; ".join(f"{k} {'/'.join(v)}" for k, v in sorted(supported.items()) if k not in _RHEL_LIKE)
        raise _Blocked(
            f"{facts['distribution']} {facts['distribution_version']} is not an OS AMD supports for ROCm {rocm} "
            f"that gpuenv provisions ({listed})"
        )
    if str(facts.get("architecture")) not in _ARCHITECTURES:
        raise _Blocked(f"architecture {facts.get('architecture')} has no amdgpu-dkms or ROCm (x86_64 only)")


def _plan(facts: dict[str, Any]) -> dict[str, Any]:
    rocm = str(facts["rocm"])
    family, version, tag, release = _os_key(str(facts["distribution"]), str(facts["distribution_version"]))
    _check_host(facts, family, version, rocm)
    gpus = [d for d in facts.get("gpus") or [] if d.get("kind") == "gpu" and d.get("vendor") == AMD]
    if not gpus:
        reason = "no AMD GPU found on the PCI bus"
        return {"action": "skip", "reason": reason, "summary": f"skipped: {reason}"}
    if facts.get("secure_boot") == "enabled" and not facts.get("allow_secure_boot"):
        raise _Blocked(_MOK_STEPS)
    kernel = str(facts.get("kernel", ""))
    is_controller = bool(facts.get("is_controller"))
    reboot_allowed = bool(facts.get("reboot", True)) and not is_controller
    smi = bool(facts.get("smi", True))
    plan: dict[str, Any] = {
        "action": "install",
        "os": tag,
        "family": family,
        "rocm": rocm,
        "repos": _repos(family, str(facts.get("repo_base") or REPO_BASE), rocm, release, version),
        "key_url": KEY_URL,
        "pin_origin": REPO_BASE.split("://")[1] if family != "rhel" else None,
        "headers": [f"kernel-devel-{kernel}", f"kernel-headers-{kernel}"]
        if family == "rhel"
        else [f"linux-headers-{kernel}", f"linux-modules-extra-{kernel}"],
        "packages": ["amdgpu-dkms"],
        # torch's ROCm wheels bundle the ROCm user space; only AMD SMI (libamd_smi.so under /opt/rocm,
        # what gpuenv verify's health checks load) comes from the ROCm repository.
        "user_space": ["amd-smi-lib"] if smi else [],
        "groups": ["render", "video"],
        "reboot_allowed": reboot_allowed,
        "reboot_reason": (
            "never: the target is the control machine itself"
            if is_controller
            else "when the loaded amdgpu differs from the installed one"
            if reboot_allowed
            else "disabled by the user"
        ),
        "gpus": [g.get("name") for g in gpus],
        "generations": sorted({str(g.get("generation") or "unknown") for g in gpus}),
    }
    smi_text = " and AMD SMI" if smi else ""
    plan["summary"] = (
        f"install amdgpu-dkms{smi_text} of ROCm {rocm} from repo.radeon.com on {tag} "
        f"for {len(gpus)} GPU(s); reboot: {plan['reboot_reason']}"
    )
    return plan


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"gpuenv_amdgpu_plan": amdgpu_plan}
