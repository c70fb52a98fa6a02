"""The driver decisions per host, worked out on the control machine from the gathered facts.

The decision itself is the playbooks' own filter (playbooks/filter_plugins/gpuenv_filters.py for
NVIDIA's driver, gpuenv_amdgpu.py for AMD's amdgpu on a ROCm stack; self-contained so a rendered
project runs with plain ansible-playbook); gpuenv loads that file and feeds it the facts the gather
pass brought back, so the plan shown before anything runs is the plan the driver role will follow.
To that it adds what the loaded driver means: install, upgrade, keep, reboot needed.
"""

from __future__ import annotations

import functools
import importlib.util
from types import ModuleType
from typing import Any

from gpuenv.compat import KnowledgeBase
from gpuenv.provision.amdgpus import AMD_VENDOR
from gpuenv.provision.perhost import HostPlan
from gpuenv.provision.variables import KbFacts, ProvisionOptions, amdgpu_variables, driver_branch, kb_facts
from gpuenv.resources import shipped_dir

CUDA_REPO_BASE = "https://developer.download.nvidia.com/compute/cuda/repos"


def _filters() -> ModuleType:
    return _filter_file("gpuenv_filters")


@functools.cache
def _filter_file(name: str) -> ModuleType:
    path = shipped_dir("playbooks") / "filter_plugins" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"gpuenv_playbook_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def driver_plans(kb: KnowledgeBase, options: ProvisionOptions, plans: tuple[HostPlan, ...]) -> dict[str, Any]:
    """The driver plan of each host with a stack, with `action_line` saying what happens to its driver."""
    out: dict[str, Any] = {}
    for plan in plans:
        if plan.stack is None:
            continue
        if not options.driver or plan.stack.cpu_only:
            why = "--skip-driver" if not options.driver else "a CPU stack needs none"
            loaded = plan.facts.driver or plan.facts.amdgpu
            kept = f"keep the loaded {loaded}" if loaded else "no driver loaded, none installed"
            out[plan.host] = {
                "action": "skip",
                "reason": why,
                "summary": f"skipped: {why}",
                "action_line": f"{kept} ({why})",
            }
            continue
        if plan.stack.platform == "rocm":
            decided = _filter_file("gpuenv_amdgpu").amdgpu_plan(_amdgpu_facts(plan, options, kb_facts(kb, plan.stack)))
            out[plan.host] = {**decided, "action_line": amdgpu_action_line(decided, plan.facts.amdgpu)}
            continue
        facts = kb_facts(kb, plan.stack)
        branch = driver_branch(plan.stack, options, facts)
        decided = _filters().driver_plan(_filter_facts(plan, options, facts, branch))
        out[plan.host] = {**decided, "action_line": action_line(decided, plan.facts.driver)}
    return out


def _filter_facts(plan: HostPlan, options: ProvisionOptions, facts: Any, branch: str) -> dict[str, Any]:
    f = plan.facts
    return {
        "distribution": f.distribution.lower(),
        "distribution_version": f.version,
        "architecture": f.architecture,
        "kernel": f.kernel,
        "gpus": [{"kind": "gpu", "device_id": g.device_id, "name": g.name} for g in f.gpus],
        "nvswitch_count": f.nvswitch_count,
        "secure_boot": f.secure_boot,
        "is_controller": f.is_controller,
        "branch": branch,
        "source": options.driver_source,
        "kernel_modules": options.kernel_modules,
        "allow_secure_boot": options.allow_secure_boot,
        "reboot": options.reboot,
        "debian_nonfree_ok": facts.debian_nonfree_ok,
        "debian_nonfree_branch": facts.debian_nonfree_branch,
        "cuda_repo_base": CUDA_REPO_BASE,
        "open_modules_policy": facts.open_modules_policy,
    }


def _amdgpu_facts(plan: HostPlan, options: ProvisionOptions, facts: KbFacts) -> dict[str, Any]:
    """What the amdgpu role's plan.yml hands the filter, from the gathered facts and the variables gpuenv writes."""
    assert plan.stack is not None
    f, written = plan.facts, amdgpu_variables(plan.stack, options, facts)
    return {
        "distribution": f.distribution.lower(),
        "distribution_version": f.version,
        "architecture": f.architecture,
        "kernel": f.kernel,
        "gpus": [{"kind": "gpu", "vendor": AMD_VENDOR, "name": g.name, "generation": g.gfx} for g in f.amd_gpus],
        "secure_boot": f.secure_boot,
        "is_controller": f.is_controller,
        "rocm": written["amdgpu_rocm"],
        "supported": written["amdgpu_supported"],
        "smi": written["amdgpu_smi"],
        "allow_secure_boot": written["amdgpu_allow_secure_boot"],
        "reboot": written["amdgpu_reboot"],
    }


def amdgpu_action_line(plan: dict[str, Any], loaded: str | None) -> str:
    """'install amdgpu-dkms of ROCm 6.4 …', or the same over a loaded amdgpu with what a reboot means."""
    if plan.get("action") != "install":
        return str(plan.get("summary"))
    what = f"amdgpu-dkms{' and AMD SMI' if plan.get('user_space') else ''} of ROCm {plan['rocm']} from repo.radeon.com"
    if not loaded:
        return f"install {what}; reboot: {plan['reboot_reason']}"
    reboot = "a reboot if it changes" if plan.get("reboot_allowed") else "reboot yourself if it changes"
    return f"install {what} over the loaded amdgpu {loaded}; {reboot}"


def action_line(plan: dict[str, Any], loaded: str | None) -> str:
    """'install R580 …', 'upgrade 550.x → R580 …, reboot needed', 'keep 580.x', 'skip: …', 'blocked: …'."""
    if plan.get("action") != "install":
        return str(plan.get("summary"))
    branch = str(plan["branch"])
    how = f"{branch} ({plan['kernel_modules']} modules) from {plan['source']}"
    if not loaded:
        return f"install {how}"
    if loaded.split(".")[0] == branch.lstrip("R"):
        return f"keep the loaded {loaded} ({how})"
    reboot = "reboot needed" if plan.get("reboot_allowed") else "reboot yourself"
    return f"upgrade {loaded} → {how}; {reboot}"
