"""`gpuenv info`: what this machine is, in about a second, like nvidia-smi with torch's collect_env.

The GPUs and the driver from NVML (init and the identity reads only), torch's version from its
package metadata (torch is never imported: that alone takes seconds), this OS and Python, and the
stack gpuenv would resolve for this machine (its driver, its GPUs' compute capability, its OS). A
machine where NVML sees no GPU gets the stack of the GPUs its PCI bus holds (AMD's: ROCm), and one
without any GPU torch's CPU build.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuenv.adapters import nvml
from gpuenv.errors import GpuenvError
from gpuenv.installed import entry_points, installed_version
from gpuenv.kb import KnowledgeBase, load_kb
from gpuenv.platforms.arch import cpu_arch, machine
from gpuenv.platforms.registry import DEFAULT_PLATFORM, for_stack, platforms
from gpuenv.resolve.request import Request
from gpuenv.resolve.service import resolve
from gpuenv.sitecheck import GROUP
from gpuenv.stack import Stack
from gpuenv.verify.launch import hostname, os_name, read_os_release
from gpuenv.verify.pci import vendor_on_pci

SCHEMA = "gpuenv.info/1"
OS_RELEASE = Path("/etc/os-release")
OPTIONAL_PACKAGES = ("nvidia-ml-py", "docker", "ansible-runner", "onnxruntime")  # gpuenv's extras' libraries


@dataclass(frozen=True)
class MachineInfo:
    hostname: str
    os: str | None  # as the knowledge base names OSes, "ubuntu22.04"
    cpu_arch: str  # as `uname -m` says it: "x86_64", "aarch64"
    python: str
    nvml: str  # "ok", or why NVML gave nothing (library-not-found, driver-not-loaded, ...)
    driver: str | None
    cuda_driver: str | None  # the newest CUDA the driver runs, "12.4"
    gpus: tuple[dict[str, Any], ...]
    torch: str | None  # from the installed package's metadata, "2.4.1+cu121"; None: not installed
    stack_request: dict[str, str]  # the constraints the stack was resolved for
    stack: Stack | None
    stack_note: str  # why there is no stack, or what it was resolved from
    packages: dict[str, str | None] = field(default_factory=dict)  # gpuenv's optional libraries, versions
    # site checks installed as entry points (gpuenv.checks), which verify runs only where enabled
    site_checks: tuple[dict[str, str | None], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = list(self.gpus)
        data["site_checks"] = list(self.site_checks)
        data["stack"] = self.stack.to_dict() if self.stack is not None else None
        return {"schema": SCHEMA, **data}


def machine_info(*, kb_path: Path | None, os_release: Path = OS_RELEASE) -> MachineInfo:
    """This machine's GPUs, driver, torch and resolved stack; never imports torch."""
    problem = nvml.init()
    versions = nvml.driver_versions() if problem is None else {}
    gpus = tuple(nvml.identities()) if problem is None else ()
    this_os, this_cpu = os_name(read_os_release(os_release)), machine()
    kb = load_kb(kb_path)  # a user's file is read once: load_kb caches only the shipped one
    asked = constraints(driver=versions.get("driver"), gpus=gpus, this_os=this_os, kb=kb)
    known = cpu_arch(this_cpu)
    asked |= {"cpu_arch": known.name} if known else {}
    bus = platform_on_bus() if not gpus else DEFAULT_PLATFORM
    if bus != DEFAULT_PLATFORM:  # no NVIDIA GPU: AMD's, or none at all
        asked = {**asked, "platform": bus}
    stack, note = _resolved(asked, kb)
    return MachineInfo(
        hostname=hostname(),
        os=this_os,
        cpu_arch=this_cpu,
        python=platform.python_version(),
        nvml=problem or ("ok" if gpus else "no GPU"),
        driver=versions.get("driver"),
        cuda_driver=versions.get("cuda_driver"),
        gpus=gpus,
        torch=installed_version("torch"),
        stack_request=asked,
        stack=stack,
        stack_note=note,
        packages={name: installed_version(name) for name in OPTIONAL_PACKAGES},
        site_checks=tuple(point._asdict() for point in entry_points(GROUP)),
    )


def constraints(
    *, driver: str | None, gpus: tuple[dict[str, Any], ...], this_os: str | None, kb: KnowledgeBase
) -> dict[str, str]:
    """What `gpuenv resolve` is asked for this machine: its driver, its GPUs' lowest compute capability
    and its OS (where the knowledge base knows it)."""
    asked: dict[str, str] = {}
    if driver:
        asked["driver"] = driver
    capabilities = sorted(str(g["compute_capability"]) for g in gpus if g.get("compute_capability"))
    if capabilities:
        major, minor = capabilities[0].split(".")
        asked["gpu"] = f"sm_{major}{minor}"
    if this_os and this_os in kb.os_by_name:
        asked["os"] = this_os
    return asked


def platform_on_bus() -> str:
    """The platform of the GPUs on this machine's PCI bus (NVIDIA's first), or the one that needs none."""
    found = [p for p in platforms() if p.host.pci_vendor and vendor_on_pci(p.host.pci_vendor)]
    return (found or [p for p in platforms() if p.host.pci_vendor is None])[0].name


def stack_line(stack: Stack) -> str:
    """'torch 2.9.1 (cu128), CUDA 12.8.1, Python 3.11, ubuntu22.04'."""
    software = for_stack(stack).resolver.software(stack)
    return f"torch {stack.torch} ({stack.build}), {software}, Python {stack.python}, {stack.os}"


def _resolved(asked: dict[str, str], kb: KnowledgeBase) -> tuple[Stack | None, str]:
    command = "gpuenv resolve " + " ".join(f"--{key.replace('_', '-')} {value}" for key, value in asked.items())
    try:
        stack = resolve(kb, Request(**asked))
    except GpuenvError as exc:
        return None, f"{command}: {exc.message}"
    if "driver" in asked:
        basis = ""
    elif "platform" in asked and for_stack(stack).host.pci_vendor is None:
        basis = " (no GPU on the PCI bus: torch's CPU build)"
    else:
        basis = " (no NVIDIA driver found: not matched to one)"
    return stack, command.strip() + basis
