"""ROCm's host half: AMD Instinct GPUs on a host's PCI bus (vendor 1002), the stack for them, AMD's amdgpu driver.

Each GPU is known by the knowledge base's `amd_gpus` (model, gfx target, first ROCm): several gfx targets
need one build that carries them all, as several compute capabilities do on an NVIDIA host. A ROCm stack,
resolved or pinned, is refused on an OS the release is not provisioned on (gpuenv.platforms.rocm.oses)
and on GPUs it has no code for. The driver plan is the amdgpu role's filter
(playbooks/filter_plugins/gpuenv_amdgpu.py), fed the gathered facts. The playbooks' filter carries its
own copy of the device ids, for hosts without gpuenv; tests/provision keep it equal to the knowledge
base's. Pure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpuenv.ansible.project import playbook_filter
from gpuenv.errors import BadRequest
from gpuenv.kb import AmdGpu, KnowledgeBase, V
from gpuenv.platforms.base import GpuFound, Resolver
from gpuenv.platforms.node import Unsupported
from gpuenv.platforms.rocm.oses import rocm_host_oses, rocm_os_refusal
from gpuenv.platforms.rocm.resolve import amd_target
from gpuenv.resolve.request import Request
from gpuenv.stack import Stack

if TYPE_CHECKING:  # only annotations: the options' modules import package metadata, off resolve's path
    from gpuenv.provision.hostfacts import GatheredHost
    from gpuenv.provision.options import ProvisionOptions

VENDOR = "1002"  # PCI vendor id of AMD's GPUs (ATI)


class RocmHost:
    pci_vendor: str | None = VENDOR
    vendor: str = "AMD"
    gpus_wanted: str = "AMD Instinct GPUs"

    def identify(self, kb: KnowledgeBase, device_id: str) -> GpuFound:
        amd = amd_gpu_by_pci_id(kb, device_id)
        model, gfx = (amd.name, amd.gfx) if amd else (None, None)
        label = f"{model} ({gfx})" if model else f"unknown {VENDOR}:{device_id}"
        wire = (("sm", None), ("vendor", VENDOR), ("gfx", gfx))
        return GpuFound(model, gfx, label, f"AMD device {VENDOR}:{device_id}", wire)

    def matches(self, kb: KnowledgeBase, gpu: str, facts: GatheredHost) -> bool | None:
        """Whether every GPU of the host is the AMD model (or gfx target) --gpu names; None: not AMD's."""
        amd = amd_target(kb, gpu)
        if amd is None:
            return None
        by_gfx = gpu.lower() == amd.gfx
        return bool(facts.gpus) and all(
            g.platform == "rocm" and (g.code == amd.gfx if by_gfx else g.model == amd.name) for g in facts.gpus
        )

    def stack(self, kb: KnowledgeBase, constraints: Request, facts: GatheredHost, resolve: Resolver) -> Stack:
        """Torch's ROCm build with GPU code for each of the host's GPUs, on an OS the amdgpu role serves."""
        gpus = _amd_models(kb, facts)
        asked = constraints.rocm or "+rocm" in (constraints.torch or "") or constraints.platform
        if not gpus and not asked:
            raise BadRequest(
                f"{facts.host}: no AMD GPU the knowledge base knows ({facts.gpu_label()}): give --rocm X.Y"
            )
        stack = _resolve_for_amd_gpus(kb, constraints, gpus, resolve)
        problem = self.refusal(kb, stack, facts, None)
        if problem:
            raise BadRequest(problem)
        return stack

    def refusal(self, kb: KnowledgeBase, stack: Stack, facts: GatheredHost, kept_driver: str | None) -> str | None:
        """An OS the amdgpu role serves for the release, GPU code and a ROCm new enough for every AMD GPU."""
        rocm = str(stack.rocm)
        os_refusal = rocm_os_refusal(kb, rocm, facts.os, facts.os_label)
        if os_refusal:
            return os_refusal
        targets = stack.arch_list.split(";")
        build = f"torch {stack.torch}+{stack.build}"
        for gpu in facts.gpus_of("rocm"):
            if gpu.code and gpu.code not in targets:
                return f"{build} has no GPU code for {gpu.model} ({gpu.code}): built for {stack.arch_list}"
            row = kb.find_amd_gpu(gpu.model or "")
            if row and row.min_rocm and V(rocm) < V(row.min_rocm):
                return f"{build} cannot serve {gpu.model} ({gpu.code}): it needs ROCm ≥ {row.min_rocm}"
        return None

    def warnings(self, facts: GatheredHost, *, skip_driver: bool) -> list[str]:
        return [
            f"unknown AMD device {VENDOR}:{g.device_id}: not in the device-id table"
            for g in facts.gpus_of("rocm")
            if not g.code
        ]

    def kept_driver(self, facts: GatheredHost) -> str | None:
        return None  # the amdgpu a host runs is no constraint of torch's ROCm builds

    def variables(self, kb: KnowledgeBase, stack: Stack, options: ProvisionOptions) -> dict[str, Any]:
        """What the amdgpu role needs: the release whose repositories it uses, the OSes it serves; no NVIDIA driver."""
        unsupported = _unsupported(stack, options)
        if unsupported is not None:
            raise unsupported.refuse()
        return {
            "nvidia_driver_enabled": False,
            "nvidia_driver_branch": "",
            "amdgpu_enabled": options.driver,
            "amdgpu_rocm": str(stack.rocm),
            "amdgpu_supported": rocm_host_oses(kb, str(stack.rocm)),
            "amdgpu_smi": True,
            "amdgpu_allow_secure_boot": options.allow_secure_boot,
            "amdgpu_reboot": options.reboot,
        }

    def driver_plan(
        self, kb: KnowledgeBase, stack: Stack, facts: GatheredHost, options: ProvisionOptions
    ) -> dict[str, Any]:
        written = self.variables(kb, stack, options)
        decided: dict[str, Any] = playbook_filter("gpuenv_amdgpu").amdgpu_plan(_amdgpu_facts(facts, written))
        return {**decided, "action_line": amdgpu_action_line(decided, facts.amdgpu)}


def amd_gpu_by_pci_id(kb: KnowledgeBase, device_id: str) -> AmdGpu | None:
    """The AMD GPU a PCI device id names: "74a1", "0x74A1" or "1002:74a1" (AMD's vendor id only)."""
    vendor, _, device = device_id.strip().lower().removeprefix("0x").rpartition(":")
    if vendor not in ("", VENDOR, f"0x{VENDOR}"):
        return None
    key = device.removeprefix("0x")
    return next((g for g in kb.amd_gpus if key in g.pci_ids), None)


def _unsupported(stack: Stack, options: ProvisionOptions) -> Unsupported | None:
    """NVIDIA's driver branch and container toolkit: what a ROCm host has no use for."""
    if options.driver_branch:
        amdgpu = f"AMD's amdgpu of ROCm {stack.rocm}"
        reason = f"--driver-branch names an NVIDIA driver branch; a ROCm {stack.rocm} stack installs {amdgpu}"
        return Unsupported(reason, "drop --driver-branch")
    if options.container_toolkit:
        return Unsupported(
            "--with-container-toolkit installs NVIDIA's container toolkit; containers on AMD GPUs need none",
            "drop it: give containers --device=/dev/kfd --device=/dev/dri --group-add video",
        )
    return None


def amdgpu_action_line(plan: dict[str, Any], loaded: str | None) -> str:
    """'install amdgpu-dkms of ROCm 6.4 …', or the same over a loaded amdgpu with what a reboot means."""
    if plan.get("action") != "install":
        return str(plan.get("summary"))
    what = f"amdgpu-dkms{' and AMD SMI' if plan.get('user_space') else ''} of ROCm {plan['rocm']} from repo.radeon.com"
    if not loaded:
        return f"install {what}; reboot: {plan['reboot_reason']}"
    reboot = "a reboot if it changes" if plan.get("reboot_allowed") else "reboot yourself if it changes"
    return f"install {what} over the loaded amdgpu {loaded}; {reboot}"


def _amdgpu_facts(f: GatheredHost, written: dict[str, Any]) -> dict[str, Any]:
    """What the amdgpu role's plan.yml hands the filter, from the gathered facts and the variables gpuenv writes."""
    return {
        **f.filter_facts(),
        "gpus": [{"kind": "gpu", "vendor": VENDOR, "name": g.name, "generation": g.code} for g in f.gpus_of("rocm")],
        "rocm": written["amdgpu_rocm"],
        "supported": written["amdgpu_supported"],
        "smi": written["amdgpu_smi"],
        "allow_secure_boot": written["amdgpu_allow_secure_boot"],
        "reboot": written["amdgpu_reboot"],
    }


def _amd_models(kb: KnowledgeBase, facts: GatheredHost) -> list[AmdGpu]:
    """The knowledge base's rows of the host's AMD GPUs, oldest first (first ROCm, then gfx target)."""
    found = {row.name: row for g in facts.gpus_of("rocm") if g.model and (row := kb.find_amd_gpu(g.model))}
    return sorted(found.values(), key=lambda r: (V(r.min_rocm or "0"), r.gfx, r.name))


def _resolve_for_amd_gpus(kb: KnowledgeBase, constraints: Request, gpus: list[AmdGpu], resolve: Resolver) -> Stack:
    """One ROCm stack with GPU code for every AMD GPU on the host (several gfx targets: all of them)."""
    if len(gpus) <= 1:
        return resolve(kb, replace(constraints, gpu=gpus[0].name) if gpus else constraints)
    problem = ""
    for pivot in (gpus[0], gpus[-1]):  # the oldest GPU decides most often; else the newest
        try:
            stack = resolve(kb, replace(constraints, gpu=pivot.name))
        except BadRequest as exc:
            problem = problem or exc.message
            continue
        misfits = [why for g in gpus if (why := _rocm_misfit(kb, stack, g))]
        if not misfits:
            targets = sorted({g.gfx for g in gpus})
            if len(targets) == 1:
                return stack
            names = ", ".join(f"{g.name} ({g.gfx})" for g in gpus)
            reasons = {**stack.reasons, "gpu": f"a mixed node: torch {stack.torch}+{stack.build} runs on {names}"}
            return replace(stack, gpu_gfx=None, arch_list=";".join(targets), reasons=reasons)
        problem = problem or f"torch {stack.torch}+{stack.build} {misfits[0]}"
    names = ", ".join(g.name for g in gpus)
    raise BadRequest(f"no one stack runs on all of this host's GPUs ({names}): {problem}")


def _rocm_misfit(kb: KnowledgeBase, stack: Stack, gpu: AmdGpu) -> str | None:
    """Why the stack's ROCm build cannot serve the GPU (no code for it, a ROCm older than its first), or None."""
    builds = kb.rocm_builds(stack.torch)
    code = builds.arch.get(stack.build, ()) if builds else ()
    if gpu.gfx not in code:
        return f"has no GPU code for {gpu.name} ({gpu.gfx})"
    if gpu.min_rocm is not None and V(str(stack.rocm)) < V(gpu.min_rocm):
        return f"is ROCm {stack.rocm}, and {gpu.name} needs ROCm ≥ {gpu.min_rocm}"
    return None
