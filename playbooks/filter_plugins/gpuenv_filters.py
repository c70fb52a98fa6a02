"""Filters for gpuenv's playbooks: parse what preflight found, and plan the NVIDIA driver installation.

The driver plan is a pure function of the facts (OS, GPUs, NVSwitches, Secure Boot, whether the
target is the control machine) and the settings (branch, source, kernel modules), so it can run
on its own (plan_driver.yml) and be tested against any hardware by overriding the facts.
This file is self-contained on purpose: a rendered project runs with plain ansible-playbook.
"""

from __future__ import annotations

import re
from typing import Any

# PCI device id (upper byte) -> GPU generation; 0x10de is NVIDIA's vendor id.
_GENERATION_BY_ID_PREFIX = {
    0x1D: "Volta",
    0x1E: "Turing",
    0x1F: "Turing",
    0x21: "Turing",
    0x20: "Ampere",
    0x22: "Ampere",
    0x24: "Ampere",
    0x25: "Ampere",
    0x23: "Hopper",
    0x26: "Ada",
    0x27: "Ada",
    0x28: "Ada",
    0x29: "Blackwell",
    0x2B: "Blackwell",
    0x2C: "Blackwell",
    0x2D: "Blackwell",
    0x2F: "Blackwell",
}
# Lowest driver branch that supports each generation: the branch of the driver bundled with the first
# CUDA release that knows its first member (Hopper and Ada: CUDA 11.8, driver 520.61.05; Blackwell:
# CUDA 12.8, R570), as gpuenv's knowledge base records it (tests/provision/test_playbook_facts.py).
MIN_BRANCH = {"Hopper": 520, "Ada": 520, "Blackwell": 570}
_OPEN_DEFAULT_FROM_BRANCH = 560  # NVIDIA's installers default to the open modules from R560
# 'SLOT [0xVENDOR] 0xDEVICE 0xCLASS[<TAB>name]'; lines without a vendor are NVIDIA's (preflight before AMD).
_PCI_LINE = re.compile(r"^(\S+)\s+(?:0x([0-9a-fA-F]{4})\s+)?0x([0-9a-fA-F]{4})\s+0x([0-9a-fA-F]{4,6})(?:\t(.*))?$")
NVIDIA, AMD = "10de", "1002"  # PCI vendor ids
# AMD Instinct PCI device id -> GPU architecture (the Linux amdgpu driver's id list, as pci.ids names them);
# gpuenv's knowledge base (amd_gpus) carries the same ids with the model names; tests/provision keep them equal.
AMD_GFX_BY_DEVICE_ID = {
    "738c": "gfx908",  # MI100
    "7408": "gfx90a",  # MI250X
    "740c": "gfx90a",  # MI250X / MI250
    "740f": "gfx90a",  # MI210
    "74a0": "gfx942",  # MI300A
    "74a1": "gfx942",  # MI300X
    "74a2": "gfx942",  # MI308X
    "74a5": "gfx942",  # MI325X
    "75a0": "gfx950",  # MI350X
    "75a3": "gfx950",  # MI355X
}
_AMD_GPU_CLASSES = ("0300", "0302", "0380", "1200")  # display controllers; Instinct parts are 0380 or 1200
_AMD_ONBOARD_VGA = ("515e", "5159")  # ES1000 / RV100 server VGA: a display, not a GPU to provision
_SUPPORTED = {"ubuntu": ("20.04", "22.04", "24.04"), "debian": ("12",), "rhel": ("8", "9")}
_RHEL_LIKE = ("rocky",)  # the RHEL family releases the knowledge base knows
_MOK_STEPS = (
    "Secure Boot is enabled: an unsigned NVIDIA kernel module will not load. Either sign it: "
    "create a Machine Owner Key (openssl req -new -x509 -newkey rsa:2048 -nodes -days 36500 "
    "-keyout /root/mok.priv -outform DER -out /root/mok.der -subj '/CN=gpuenv MOK/'), enrol it "
    "(mokutil --import /root/mok.der), reboot and confirm the enrolment at the console, and let "
    "DKMS sign with it (mok_signing_key/mok_certificate in /etc/dkms/framework.conf); or disable "
    "Secure Boot in the firmware. Then rerun with --allow-secure-boot."
)


def parse_pci(text: str) -> list[dict[str, str]]:
    """Lines 'SLOT [0xVENDOR] 0xDEVICE 0xCLASS[<TAB>lspci description]' -> one dict per NVIDIA function
    and per AMD GPU (AMD's other functions, such as a GPU's audio, are left out)."""
    devices = []
    for line in text.splitlines():
        match = _PCI_LINE.match(line.strip("\n"))
        if not match:
            continue
        slot, vendor, device, pci_class, name = match.groups()
        vendor, device, cls = (vendor or NVIDIA).lower(), device.lower(), pci_class.lower().ljust(6, "0")
        if vendor == AMD:
            if cls[:4] in _AMD_GPU_CLASSES and device not in _AMD_ONBOARD_VGA:
                devices.append(_amd_device(slot, device, cls, name))
            continue
        if vendor != NVIDIA:
            continue
        kind = "gpu" if cls[:4] in ("0300", "0302") else "nvswitch" if cls[:4] == "0680" else "other"
        devices.append(
            {
                "slot": slot,
                "vendor": NVIDIA,
                "device_id": device,
                "class": cls,
                "kind": kind,
                "name": (name or "").strip() or f"NVIDIA device 10de:{device}",
                "generation": generation(device),
            }
        )
    return devices


def _amd_device(slot: str, device: str, cls: str, name: str | None) -> dict[str, str]:
    return {
        "slot": slot,
        "vendor": AMD,
        "device_id": device,
        "class": cls,
        "kind": "gpu",
        "name": (name or "").strip() or f"AMD device 1002:{device}",
        "generation": AMD_GFX_BY_DEVICE_ID.get(device, "unknown"),  # the gfx target, "gfx942"
    }


def platform_refusal(host: str, platform: str, devices: list[dict[str, Any]], stack: str) -> str:
    """'' when the stack's platform fits the GPUs found; else one line naming the host and what was found.
    A ROCm stack needs AMD GPUs and no NVIDIA ones; a CUDA stack no AMD GPUs (a CPU stack runs anywhere)."""
    gpus = [d for d in devices if d.get("kind") == "gpu"]
    amd = [d for d in gpus if d.get("vendor") == AMD]
    nvidia = [d for d in gpus if d.get("vendor", NVIDIA) == NVIDIA]
    other = {"rocm": nvidia, "cuda": amd}.get(platform, [])
    if not other:
        return ""
    found = ", ".join(sorted({str(d.get("name")) for d in other}))
    vendor = "NVIDIA" if other is nvidia else "AMD"
    wants = "AMD Instinct GPUs" if platform == "rocm" else "NVIDIA GPUs"
    return f"{host}: {stack} needs {wants}, but the host has {len(other)} {vendor} GPU(s) ({found})"


def generation(device_id: str) -> str:
    try:
        return _GENERATION_BY_ID_PREFIX.get(int(device_id, 16) >> 8, "unknown")
    except ValueError:
        return "unknown"


def secure_boot_state(text: str) -> str:
    lowered = text.lower()
    if "secureboot enabled" in lowered or lowered.strip() == "efivar 1":
        return "enabled"
    if "secureboot disabled" in lowered or "legacy-bios" in lowered or lowered.strip() == "efivar 0":
        return "disabled"
    return "unknown"


def _os_key(distribution: str, version: str) -> tuple[str, str, str]:
    """('ubuntu', '22.04', 'ubuntu2204') / ('debian', '12', 'debian12') / ('rhel', '9', 'rhel9')."""
    dist = distribution.lower()
    if dist in _RHEL_LIKE:
        major = version.split(".")[0]
        return "rhel", major, f"rhel{major}"
    if dist == "debian":
        major = version.split(".")[0]
        return "debian", major, f"debian{major}"
    return dist, version, f"{dist}{version.replace('.', '')}"


def _kernel_modules(
    generations: set[str], branch: int, choice: str, policy: dict[str, str], by_device: set[str]
) -> tuple[str, str]:
    """'open' or 'proprietary', with the reason (by_device: what GPU models need beyond their generation)."""
    needs = {policy.get(g, "recommended") for g in generations} | by_device
    if choice in ("open", "proprietary"):
        if choice == "proprietary" and "required" in needs:
            raise _Blocked("these GPUs need the open kernel modules; --kernel-modules proprietary cannot work")
        if choice == "open" and "unsupported" in needs:
            raise _Blocked("these GPUs are not supported by the open kernel modules")
        return choice, "chosen by the user"
    if "required" in needs and "unsupported" in needs:
        raise _Blocked("this host mixes GPUs that need the open modules with GPUs they do not support")
    if "required" in needs:
        whose = "GPU model" if "required" in by_device else "GPU generation"
        return "open", f"the {whose} requires the open kernel modules"
    if "unsupported" in needs:
        return "proprietary", "the GPU generation is not supported by the open kernel modules"
    if branch >= _OPEN_DEFAULT_FROM_BRANCH:
        return "open", f"recommended for this GPU generation and the default from R{_OPEN_DEFAULT_FROM_BRANCH}"
    return "proprietary", f"the default before R{_OPEN_DEFAULT_FROM_BRANCH}"


class _Blocked(Exception):
    pass


def _repo(base: str, tag: str, arch: str) -> str:
    return f"{base}/{tag}/{'sbsa' if arch == 'aarch64' else arch}/"


def _packages(family: str, source: str, branch: int, modules: str) -> dict[str, Any]:
    """What to install for one OS family and source."""
    if family == "ubuntu" and source == "distro":
        suffix = "-open" if modules == "open" else ""
        return {
            "packages": [f"nvidia-headless-{branch}-server{suffix}", f"nvidia-utils-{branch}-server"],
            "hold": [f"nvidia-headless-{branch}-server{suffix}", f"nvidia-utils-{branch}-server"],
            "fabric_manager": [f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}"],
            "version_from": f"nvidia-utils-{branch}-server",
        }
    if family == "debian" and source == "distro":
        kernel = "nvidia-open-kernel-dkms" if modules == "open" else "nvidia-kernel-dkms"
        pkgs = ["nvidia-driver", kernel, "nvidia-smi", "firmware-misc-nonfree"]
        return {"packages": pkgs, "hold": pkgs, "fabric_manager": [], "version_from": "nvidia-driver"}
    if family in ("ubuntu", "debian"):
        pkg = f"nvidia-open-{branch}" if modules == "open" else f"cuda-drivers-{branch}"
        return {
            "packages": [pkg],
            "hold": [pkg],
            "fabric_manager": [f"nvidia-fabricmanager-{branch}"],
            "version_from": pkg,
        }
    stream = f"{branch}-open" if modules == "open" else f"{branch}-dkms"
    return {
        "packages": [f"@nvidia-driver:{stream}"],
        "module_stream": stream,
        "hold": ["nvidia-driver*", "kmod-nvidia*"],
        "fabric_manager": ["nvidia-fabric-manager"],
        "version_from": "nvidia-driver",
    }


def driver_plan(facts: dict[str, Any]) -> dict[str, Any]:
    """The driver decisions for one host; action is 'install', 'skip' or 'blocked'."""
    try:
        return _plan(facts)
    except _Blocked as exc:
        return {"action": "blocked", "reason": str(exc), "summary": f"blocked: {exc}"}


def _plan(facts: dict[str, Any]) -> dict[str, Any]:
    family, version, tag = _os_key(str(facts["distribution"]), str(facts["distribution_version"]))
    if version not in _SUPPORTED.get(family, ()):
        raise _Blocked(
            f"{facts['distribution']} {facts['distribution_version']} is not supported "
            "(Ubuntu 20.04/22.04/24.04, Debian 12, Rocky Linux 8/9)"
        )
    gpus = [d for d in facts.get("gpus") or [] if d.get("kind") == "gpu" and d.get("vendor", NVIDIA) == NVIDIA]
    if not gpus:
        return {
            "action": "skip",
            "reason": "no NVIDIA GPU found on the PCI bus",
            "summary": "skipped: no NVIDIA GPU found on the PCI bus",
        }
    if facts.get("secure_boot") == "enabled" and not facts.get("allow_secure_boot"):
        raise _Blocked(_MOK_STEPS)
    generations = {str(g.get("generation") or generation(str(g.get("device_id", "")))) for g in gpus}
    source = str(facts.get("source", "auto"))
    branch = int(str(facts["branch"]).lstrip("Rr"))
    nonfree_branch = int(str(facts.get("debian_nonfree_branch", "535")).lstrip("Rr"))
    notes: list[str] = []
    if source == "auto":
        if family == "debian":
            fits = bool(facts.get("debian_nonfree_ok")) and all(
                MIN_BRANCH.get(g, 0) <= nonfree_branch for g in generations
            )
            source = "distro" if fits else "cuda-repo"
            notes.append(
                f"Debian's non-free nvidia-driver {nonfree_branch} "
                + ("runs this stack on these GPUs" if fits else "does not run this stack on these GPUs")
            )
        elif family == "ubuntu":
            source = "cuda-repo" if version == "20.04" else "distro"
            if version == "20.04":
                notes.append("Ubuntu 20.04's archive no longer carries current server branches")
        else:
            source = "cuda-repo"
    if family == "debian" and source == "distro":
        branch = nonfree_branch
    for gen in sorted(generations):
        if branch < MIN_BRANCH.get(gen, 0):
            raise _Blocked(f"{gen} GPUs need driver branch R{MIN_BRANCH[gen]} or newer, not R{branch}")
    by_device = dict(facts.get("open_modules_by_device") or {})  # GH200 and GB200: open modules whatever the branch
    models = {by_device[d] for g in gpus if (d := str(g.get("device_id", "")).lower()) in by_device}
    modules, modules_why = _kernel_modules(
        generations,
        branch,
        str(facts.get("kernel_modules", "auto")),
        dict(facts.get("open_modules_policy") or {}),
        models,
    )
    chosen = _packages(family, source, branch, modules)
    kernel = str(facts.get("kernel", ""))
    nvswitches = int(facts.get("nvswitch_count") or 0)
    fabric = chosen["fabric_manager"] if nvswitches else []
    if nvswitches and "Blackwell" in generations:
        fabric = [*fabric, "nvlsm"]  # Blackwell NVSwitch systems also need the NVLink subnet manager
    is_controller = bool(facts.get("is_controller"))
    reboot_allowed = bool(facts.get("reboot", True)) and not is_controller
    plan = {
        "action": "install",
        "os": tag,
        "family": family,
        "branch": f"R{branch}",
        "source": source,
        "repo": _repo(str(facts.get("cuda_repo_base")), tag, str(facts.get("architecture")))
        if source == "cuda-repo"
        else None,
        "packages": chosen["packages"],
        "module_stream": chosen.get("module_stream"),
        "kernel_modules": modules,
        "kernel_modules_reason": modules_why,
        "headers": [f"kernel-devel-{kernel}", f"kernel-headers-{kernel}"]
        if family == "rhel"
        else [f"linux-headers-{kernel}"],
        "fabric_manager": fabric,
        "hold": chosen["hold"],
        "hold_method": "versionlock" if family == "rhel" else "apt-mark",
        "version_from": chosen["version_from"],
        "blacklist_nouveau": True,
        "reboot_allowed": reboot_allowed,
        "reboot_reason": (
            "never: the target is the control machine itself"
            if is_controller
            else "when the loaded driver differs from the installed one"
            if reboot_allowed
            else "disabled by the user"
        ),
        "gpus": [g["name"] for g in gpus],
        "generations": sorted(generations),
        "notes": notes,
    }
    fm = f", Fabric Manager ({len(fabric)} packages)" if fabric else ""
    plan["summary"] = (
        f"install R{branch} ({modules} modules) from {source} on {tag} "
        f"for {len(gpus)} GPU(s){fm}; reboot: {plan['reboot_reason']}"
    )
    return plan


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "gpuenv_parse_pci": parse_pci,
            "gpuenv_driver_plan": driver_plan,
            "gpuenv_secure_boot_state": secure_boot_state,
            "gpuenv_platform_refusal": platform_refusal,
        }
