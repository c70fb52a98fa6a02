"""The variables file of the Ansible project: the stack and the options, as the roles name them.

Only this file and the inventory are rendered; the playbooks are static. Values are written as
JSON (which YAML reads the same), after a last check that none could be taken for a template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpuenv import validate
from gpuenv.compat import KnowledgeBase, OsInfo, driver_runs_cuda
from gpuenv.errors import BadRequest
from gpuenv.provision.amdgpus import rocm_host_oses
from gpuenv.requirements import gpuenv_requirements
from gpuenv.stack import Stack
from gpuenv.types import DeviceChoice, Level
from gpuenv.verify.options import SiteOptions

DRIVER_SOURCES = ("auto", "distro", "cuda-repo")
KERNEL_MODULES = ("auto", "open", "proprietary")
DEBIAN_NONFREE_BRANCH = "R535"  # what Debian 12's non-free component ships
STACK_SUMMARY = ("torch", "torchvision", "cuda", "cuda_build", "python", "os", "driver_branch")


@dataclass(frozen=True)
class ProvisionOptions:
    venv: str = "/opt/gpuenv/venv"
    wheelhouse: str | None = None  # a directory on the controller (absolute)
    index_url: str | None = None  # a mirror of the stack's wheel index
    gpuenv_wheel: str | None = None  # gpuenv's own wheel on the controller (absolute)
    torch_only: bool = False
    driver: bool = True
    driver_branch: str | None = None  # "580"; default: the stack's
    driver_source: str = "auto"
    kernel_modules: str = "auto"
    allow_secure_boot: bool = False
    reboot: bool = True
    container_toolkit: bool = False
    verify: bool = True
    verify_level: Level = "quick"
    verify_device: DeviceChoice = "auto"
    reports_dir: str = "reports"  # on the controller (absolute)
    min_free_gb: int = 10
    site_checks_dir: str | None = None  # a checks directory on the controller (absolute)
    site_checks_files: tuple[str, ...] = ()  # the files it ships
    site_checks_wheels: tuple[str, ...] = ()  # site check packages on the controller (absolute)


@dataclass(frozen=True)
class KbFacts:
    """What the roles need from the knowledge base for one stack."""

    python_by_os: dict[str, dict[str, Any]]
    supported: dict[str, list[str]]  # host OS releases by Ansible distribution (lower case): versions
    os_names: dict[str, str]  # "Debian 12" (Ansible's distribution and version) -> "debian12"
    open_modules_policy: dict[str, str]
    debian_nonfree_ok: bool
    debian_nonfree_branch: str = "535"
    min_driver_branch: int = 0  # the lowest branch that runs the stack's CUDA
    rocm_supported: dict[str, list[str]] | None = None  # a ROCm stack: the host OSes its release is provisioned on


def min_driver_branch(kb: KnowledgeBase, stack: Stack) -> int:
    """The lowest driver branch that runs the stack's CUDA (minor-version compatibility included)."""
    row = kb.find_cuda(stack.cuda)
    if row is None:
        raise BadRequest(f"unknown CUDA version {stack.cuda}", hint="resolve the stack again with gpuenv resolve")
    floor = int(row.minor_compat_floor.split(".")[0])
    assert driver_runs_cuda(kb, str(floor), stack.cuda).ok  # the one definition of "runs"
    return floor


def driver_branch(stack: Stack, options: ProvisionOptions, facts: KbFacts) -> str:
    """The NVIDIA branch to install (asked for, else the stack's), checked to run the stack before anything is
    written; "" for a ROCm stack, whose driver is the amdgpu of its ROCm release."""
    if stack.platform == "rocm":
        if options.driver_branch:
            raise BadRequest(
                f"--driver-branch names an NVIDIA driver branch; a ROCm {stack.rocm} stack installs AMD's amdgpu "
                f"of ROCm {stack.rocm}",
                hint="drop --driver-branch",
            )
        return ""
    if stack.cpu_only:
        return validate.driver_branch(options.driver_branch) if options.driver_branch else ""
    what = "--driver-branch" if options.driver_branch else "the stack's driver_branch"
    branch = validate.driver_branch(options.driver_branch or stack.driver_branch, what)
    if int(branch) < facts.min_driver_branch:
        raise BadRequest(
            f"{what} R{branch} cannot run CUDA {stack.cuda}: the lowest branch that does is R{facts.min_driver_branch}",
            hint=f"drop --driver-branch to install the stack's {stack.driver_branch}, or give a newer branch",
        )
    return branch


def host_oses(kb: KnowledgeBase) -> list[tuple[str, OsInfo]]:
    """The OSes gpuenv provisions, each with Ansible's name for its distribution ("Ubuntu", "Rocky")."""
    return [(o.ansible.distribution, o) for o in kb.os if "host" in o.roles and o.ansible is not None]


def kb_facts(kb: KnowledgeBase, stack: Stack) -> KbFacts:
    python_by_os = {
        o.name: {"via": p.via, "packages": list(p.packages)}
        for o in kb.os
        if "host" in o.roles and (p := o.python.get(stack.python)) is not None
    }
    hosts = host_oses(kb)
    supported: dict[str, list[str]] = {}
    for distribution, o in hosts:
        supported.setdefault(distribution.lower(), []).append(o.version)
    policy = {a.family: a.open_modules for a in kb.architectures}
    nonfree = next((b for b in kb.driver_branches if b.branch == DEBIAN_NONFREE_BRANCH), None)
    runs = nonfree and nonfree.latest and stack.platform == "cuda"
    verdict = driver_runs_cuda(kb, nonfree.latest, stack.cuda) if runs and nonfree and nonfree.latest else None
    return KbFacts(
        python_by_os=python_by_os,
        supported=supported,
        os_names={f"{distribution} {o.version}": o.name for distribution, o in hosts},
        open_modules_policy=policy,
        debian_nonfree_ok=bool(verdict and verdict.ok),
        debian_nonfree_branch=DEBIAN_NONFREE_BRANCH[1:],
        min_driver_branch=min_driver_branch(kb, stack) if stack.platform == "cuda" else 0,
        rocm_supported=rocm_host_oses(kb, str(stack.rocm)) if stack.platform == "rocm" else None,
    )


def requirements(stack: Stack, *, torch_only: bool) -> list[str]:
    """The stack's pinned pip requirements, without the index line."""
    lines = [r for r in stack.requirements() if not r.startswith("--")]
    if torch_only:
        lines = [r for r in lines if not r.startswith(("torchvision==", "torchaudio=="))]
    return lines


def variables(stack: Stack, options: ProvisionOptions, facts: KbFacts) -> dict[str, Any]:
    branch = driver_branch(stack, options, facts)
    values = {
        "gpuenv_stack": {k: getattr(stack, k) for k in STACK_SUMMARY},
        "preflight_min_free_gb": options.min_free_gb,
        "preflight_supported": facts.supported,
        "nvidia_driver_enabled": options.driver and stack.platform == "cuda",  # CPU: none; ROCm: amdgpu
        "nvidia_driver_branch": branch,
        "nvidia_driver_source": options.driver_source,
        "nvidia_driver_kernel_modules": options.kernel_modules,
        "nvidia_driver_allow_secure_boot": options.allow_secure_boot,
        "nvidia_driver_reboot": options.reboot,
        "nvidia_driver_debian_nonfree_ok": facts.debian_nonfree_ok,
        "nvidia_driver_debian_nonfree_branch": facts.debian_nonfree_branch,
        "nvidia_driver_open_modules_policy": facts.open_modules_policy,
        "container_toolkit_enabled": options.container_toolkit,
        "pytorch_python": stack.python,
        "pytorch_python_by_os": facts.python_by_os,
        "pytorch_os_names": facts.os_names,
        "pytorch_venv": options.venv,
        "pytorch_requirements": requirements(stack, torch_only=options.torch_only),
        "pytorch_index_url": "" if options.wheelhouse else (options.index_url or stack.index_url),
        "pytorch_wheelhouse": options.wheelhouse or "",
        "pytorch_gpuenv_wheel": options.gpuenv_wheel or "",
        "pytorch_gpuenv_requirements": list(gpuenv_requirements()),
        "verify_enabled": options.verify,
        "verify_level": options.verify_level,
        "verify_device": options.verify_device,
        "verify_venv": options.venv,
        "verify_reports_dir": options.reports_dir,
    }
    values |= site_variables(options)
    return {**values, **amdgpu_variables(stack, options, facts)} if stack.platform == "rocm" else values


SITE_CHECKS_DEST = "/etc/gpuenv/checks.d"  # where a host keeps the site's checks directory


def site_variables(options: ProvisionOptions) -> dict[str, Any]:
    """The site checks role's variables, and the options that name them to verify on the host (none
    when no site check is shipped)."""
    if not (options.site_checks_files or options.site_checks_wheels):
        return {}
    site = SiteOptions(
        checks_dir=SITE_CHECKS_DEST if options.site_checks_files else None, all_plugins=bool(options.site_checks_wheels)
    )
    return {
        "site_checks_src": options.site_checks_dir or "",
        "site_checks_files": list(options.site_checks_files),
        "site_checks_dest": SITE_CHECKS_DEST,
        "site_checks_wheels": list(options.site_checks_wheels),
        "verify_site_args": site.arguments(),
    }


def amdgpu_variables(stack: Stack, options: ProvisionOptions, facts: KbFacts) -> dict[str, Any]:
    """What the amdgpu role needs for a ROCm stack: the release whose repositories it uses, the OSes it serves."""
    if options.container_toolkit:
        raise BadRequest(
            "--with-container-toolkit installs NVIDIA's container toolkit; containers on AMD GPUs need none",
            hint="drop it: give containers --device=/dev/kfd --device=/dev/dri --group-add video",
        )
    rocm = str(stack.rocm)
    return {
        "amdgpu_enabled": options.driver,
        "amdgpu_rocm": rocm,
        "amdgpu_supported": facts.rocm_supported or {},
        "amdgpu_smi": True,
        "amdgpu_allow_secure_boot": options.allow_secure_boot,
        "amdgpu_reboot": options.reboot,
    }


def _refuse_templates(value: Any, name: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_templates(item, f"{name}.{key}")
    elif isinstance(value, list):
        for item in value:
            _refuse_templates(item, name)
    elif isinstance(value, str) and any(mark in value for mark in ("{{", "{%", "{#")):
        raise BadRequest(f"{name} holds template markup: {value[:60]!r}", hint="remove the braces")


def _stack_comment(stack: Stack) -> str:
    if stack.platform == "rocm":
        return (
            f"# Stack: torch {stack.torch}, ROCm {stack.rocm} ({stack.cuda_build}), Python {stack.python}, "
            f"AMD's amdgpu of ROCm {stack.rocm}."
        )
    if stack.cpu_only:
        return f"# Stack: torch {stack.torch} (CPU build), Python {stack.python}."
    return (
        f"# Stack: torch {stack.torch}, CUDA {stack.cuda} ({stack.cuda_build}), Python {stack.python}, "
        f"driver branch {stack.driver_branch}."
    )


def render_variables(stack: Stack, options: ProvisionOptions, facts: KbFacts) -> str:
    values = variables(stack, options, facts)
    _refuse_templates(values, "variables")
    lines = [
        "# Written by gpuenv provision: the stack and options this project installs.",
        _stack_comment(stack),
        "---",
    ]
    lines += [f"{key}: {json.dumps(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"
