"""CUDA's host half: NVIDIA GPUs on a host's PCI bus (vendor 10de), the stack for them, and NVIDIA's driver.

A host's stack carries GPU code for every compute capability on it (a mixed node: all of them); a pinned
stack is refused on GPUs it has no code for, or under a loaded driver --skip-driver keeps that cannot run
it. The driver plan is the playbooks' own filter (playbooks/filter_plugins/gpuenv_filters.py), fed the
gathered facts, so the plan shown before anything runs is the one the nvidia_driver role follows. Pure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpuenv import validate
from gpuenv.ansible.project import playbook_filter
from gpuenv.errors import BadRequest
from gpuenv.kb import KnowledgeBase, PciDevice, driver_runs_cuda, gpu_code_for
from gpuenv.platforms.base import GpuFound, Resolver
from gpuenv.platforms.cuda.resolve import rows_named
from gpuenv.resolve.request import Request
from gpuenv.stack import Stack

if TYPE_CHECKING:  # only annotations: the options' modules import package metadata, off resolve's path
    from gpuenv.provision.hostfacts import GatheredHost
    from gpuenv.provision.options import ProvisionOptions

VENDOR = "10de"  # PCI vendor id of NVIDIA's GPUs
CUDA_REPO_BASE = "https://developer.download.nvidia.com/compute/cuda/repos"
DEBIAN_NONFREE_BRANCH = "R535"  # what Debian 12's non-free component ships


class CudaHost:
    pci_vendor: str | None = VENDOR
    vendor: str = "NVIDIA"
    gpus_wanted: str = "NVIDIA GPUs"

    def identify(self, kb: KnowledgeBase, device_id: str) -> GpuFound:
        known = gpu_by_pci_id(kb, device_id)
        model, sm = (known.gpu.name, known.sm) if known else (None, None)
        label = f"{model} (sm_{sm.replace('.', '')})" if model and sm else f"unknown {VENDOR}:{device_id}"
        return GpuFound(model, sm, label, f"NVIDIA device {VENDOR}:{device_id}", (("sm", sm),))

    def matches(self, kb: KnowledgeBase, gpu: str, facts: GatheredHost) -> bool | None:
        """Whether every GPU of the host is the model (or compute capability) --gpu names; None: not NVIDIA's."""
        if gpu.lower().startswith("sm_"):
            digits = gpu[3:]
            wanted: str | None = f"{digits[:-1]}.{digits[-1]}"
        else:
            found = kb.find_gpu(gpu)
            wanted = found.sm if found else None
        if wanted is None:
            return None
        return bool(facts.gpus) and all(g.platform == "cuda" and g.code == wanted for g in facts.gpus)

    def stack(self, kb: KnowledgeBase, constraints: Request, facts: GatheredHost, resolve: Resolver) -> Stack:
        """One stack with GPU code for every compute capability on the host (a mixed node: all of them)."""
        sms = sorted(
            {g.code for g in facts.gpus_of("cuda") if g.code}, key=lambda sm: tuple(int(p) for p in sm.split("."))
        )
        return _resolve_for_gpus(kb, constraints, sms, resolve)

    def refusal(self, kb: KnowledgeBase, stack: Stack, facts: GatheredHost, kept_driver: str | None) -> str | None:
        for gpu in facts.gpus_of("cuda"):
            if gpu.code and not _build_runs_on(kb, stack, gpu.code):
                sm = gpu.code.replace(".", "")
                return f"torch {stack.torch}+{stack.build} has no GPU code for {gpu.model} (sm_{sm})"
        if kept_driver:
            verdict = driver_runs_cuda(kb, kept_driver, stack.build)
            if not verdict.ok:
                return f"the loaded driver, kept by --skip-driver, cannot run the stack: {verdict.message}"
        return None

    def warnings(self, facts: GatheredHost, *, skip_driver: bool) -> list[str]:
        gpus = facts.gpus_of("cuda")
        out = [f"unknown NVIDIA device {VENDOR}:{g.device_id}: not in the device-id table" for g in gpus if not g.code]
        if skip_driver and gpus and not facts.driver:
            out.append("--skip-driver, but no NVIDIA driver is loaded: the GPUs stay unusable")
        return out

    def kept_driver(self, facts: GatheredHost) -> str | None:
        return facts.driver if facts.gpus_of("cuda") else None

    def variables(self, kb: KnowledgeBase, stack: Stack, options: ProvisionOptions) -> dict[str, Any]:
        nonfree = next((b for b in kb.driver_branches if b.branch == DEBIAN_NONFREE_BRANCH), None)
        verdict = driver_runs_cuda(kb, nonfree.latest, stack.cuda) if nonfree and nonfree.latest else None
        return {
            "nvidia_driver_enabled": options.driver,
            "nvidia_driver_branch": driver_branch(kb, stack, options),
            "nvidia_driver_source": options.driver_source,
            "nvidia_driver_kernel_modules": options.kernel_modules,
            "nvidia_driver_allow_secure_boot": options.allow_secure_boot,
            "nvidia_driver_reboot": options.reboot,
            "nvidia_driver_debian_nonfree_ok": bool(verdict and verdict.ok),
            "nvidia_driver_debian_nonfree_branch": DEBIAN_NONFREE_BRANCH[1:],
            "nvidia_driver_open_modules_policy": {a.family: a.open_modules for a in kb.architectures},
            "nvidia_driver_open_modules_by_device": open_modules_by_device(kb),
        }

    def driver_plan(
        self, kb: KnowledgeBase, stack: Stack, facts: GatheredHost, options: ProvisionOptions
    ) -> dict[str, Any]:
        written = self.variables(kb, stack, options)
        decided: dict[str, Any] = playbook_filter("gpuenv_filters").driver_plan(_filter_facts(facts, written))
        return {**decided, "action_line": action_line(decided, facts.driver)}


def open_modules_by_device(kb: KnowledgeBase) -> dict[str, str]:
    """PCI device id -> open kernel modules, for the GPU models whose need is their own (GH200: required)."""
    return {d.device_id: d.gpu.open_modules for d in kb.pci_devices if d.gpu.open_modules}


def gpu_by_pci_id(kb: KnowledgeBase, device_id: str) -> PciDevice | None:
    """The GPU a PCI device id names: "20b0", "0x20B0" or "10de:20b0" (NVIDIA's vendor id only)."""
    vendor, _, device = device_id.strip().lower().removeprefix("0x").rpartition(":")
    if vendor not in ("", VENDOR, f"0x{VENDOR}"):
        return None
    return kb.pci_by_id.get(device.removeprefix("0x"))


def min_driver_branch(kb: KnowledgeBase, stack: Stack) -> int:
    """The lowest driver branch that runs the stack's CUDA (minor-version compatibility included)."""
    named = rows_named(kb, stack.cuda)
    if not named:
        raise BadRequest(f"unknown CUDA version {stack.cuda}", hint="resolve the stack again with gpuenv resolve")
    floor = int(named[0].minor_compat_floor.split(".")[0])
    assert driver_runs_cuda(kb, str(floor), stack.cuda).ok  # the one definition of "runs"
    return floor


def driver_branch(kb: KnowledgeBase, stack: Stack, options: ProvisionOptions) -> str:
    """The NVIDIA branch to install (asked for, else the stack's), checked to run the stack before anything is
    written."""
    what = "--driver-branch" if options.driver_branch else "the stack's driver_branch"
    branch = validate.driver_branch(options.driver_branch or stack.driver_branch, what)
    lowest = min_driver_branch(kb, stack)
    if int(branch) < lowest:
        raise BadRequest(
            f"{what} R{branch} cannot run CUDA {stack.cuda}: the lowest branch that does is R{lowest}",
            hint=f"drop --driver-branch to install the stack's {stack.driver_branch}, or give a newer branch",
        )
    return branch


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


def _filter_facts(f: GatheredHost, written: dict[str, Any]) -> dict[str, Any]:
    """What plan_driver.yml hands the filter, from the gathered facts and the variables gpuenv writes."""
    return {
        **f.filter_facts(),
        "gpus": [{"kind": "gpu", "device_id": g.device_id, "name": g.name} for g in f.gpus],
        "nvswitch_count": f.nvswitch_count,
        "branch": written["nvidia_driver_branch"],
        "source": written["nvidia_driver_source"],
        "kernel_modules": written["nvidia_driver_kernel_modules"],
        "allow_secure_boot": written["nvidia_driver_allow_secure_boot"],
        "reboot": written["nvidia_driver_reboot"],
        "debian_nonfree_ok": written["nvidia_driver_debian_nonfree_ok"],
        "debian_nonfree_branch": written["nvidia_driver_debian_nonfree_branch"],
        "cuda_repo_base": CUDA_REPO_BASE,
        "open_modules_policy": written["nvidia_driver_open_modules_policy"],
        "open_modules_by_device": written["nvidia_driver_open_modules_by_device"],
    }


def _resolve_for_gpus(kb: KnowledgeBase, constraints: Request, sms: list[str], resolve: Resolver) -> Stack:
    """One stack with GPU code for every compute capability on the host (a mixed node: all of them)."""
    if not sms:
        return resolve(kb, constraints)
    problem = ""
    for pivot in (sms[0], sms[-1]):  # the oldest GPU decides most often; else the newest
        stack = resolve(kb, replace(constraints, gpu=f"sm_{pivot.replace('.', '')}"))
        missing = [sm for sm in sms if not _build_runs_on(kb, stack, sm)]
        if not missing:
            if len(sms) == 1:
                return stack
            reasons = {
                **stack.reasons,
                "gpu": f"a mixed node: torch {stack.torch}+{stack.build} runs on {', '.join(sms)}",
            }
            return replace(stack, gpu_sm=None, arch_list=";".join(sms), reasons=reasons)
        problem = f"torch {stack.torch}+{stack.build} has no GPU code for sm_{missing[0].replace('.', '')}"
    raise BadRequest(f"no one stack runs on all of this host's GPUs ({', '.join(sms)}): {problem}")


def _build_runs_on(kb: KnowledgeBase, stack: Stack, sm: str) -> bool:
    published = kb.for_cpu_arch(stack.cpu_arch) or kb  # the GPU code of the build for the host's CPU
    release = next((t for t in published.torch if t.version == stack.torch), None)
    code = release.arch.get(stack.build) if release else None
    return code is not None and gpu_code_for(code, sm) is not None
