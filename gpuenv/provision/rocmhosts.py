"""The ROCm side of per-host resolution: an AMD Instinct host's stack, and why a host cannot take one. Pure.

An AMD host gets torch's ROCm build for its GPUs, each known by the knowledge base's `amd_gpus` (model,
gfx target, first ROCm): several gfx targets need one build that carries them all, as several compute
capabilities do on an NVIDIA host (perhost). A ROCm stack, resolved or pinned, is refused on an OS the
release is not provisioned on (gpuenv.provision.amdgpus), off x86_64, and on GPUs it has no code for.
"""

from __future__ import annotations

from dataclasses import replace

from gpuenv.compat import AmdGpu, KnowledgeBase, V
from gpuenv.errors import BadRequest
from gpuenv.provision.amdgpus import ROCM_ARCHITECTURES, rocm_os_refusal
from gpuenv.provision.hostfacts import HostFacts
from gpuenv.resolve import Request, resolve
from gpuenv.resolve_rocm import wants_rocm
from gpuenv.stack import Stack


def asked_platform_refusal(constraints: Request, facts: HostFacts) -> str | None:
    """--cuda (or a +cu torch) on AMD GPUs, --rocm (or a +rocm torch) on NVIDIA GPUs: one line naming both."""
    torch_build = (constraints.torch or "").partition("+")[2]
    if facts.amd_gpus and (constraints.cuda or torch_build.startswith("cu")):
        asked = f"--cuda {constraints.cuda}" if constraints.cuda else f"--torch {constraints.torch}"
        wanted, gpus = "a CUDA stack, which needs NVIDIA GPUs", facts.amd_gpus
    elif facts.nvidia_gpus and (constraints.rocm or torch_build.startswith("rocm")):
        asked = f"--rocm {constraints.rocm}" if constraints.rocm else f"--torch {constraints.torch}"
        wanted, gpus = "a ROCm stack, which needs AMD Instinct GPUs", facts.nvidia_gpus
    else:
        return None
    return f"{facts.host}: {asked} asks for {wanted}, but the host has {facts.gpu_label(gpus)}"


def rocm_host_stack(kb: KnowledgeBase, constraints: Request, facts: HostFacts) -> Stack:
    """An AMD host's stack: torch's ROCm build with GPU code for each of its GPUs, on an OS the amdgpu role
    serves. BadRequest: why the host gets none."""
    gpus = _amd_models(kb, facts)
    if not gpus and not (wants_rocm(kb, constraints) or "+rocm" in (constraints.torch or "")):
        raise BadRequest(f"{facts.host}: no AMD GPU the knowledge base knows ({facts.gpu_label()}): give --rocm X.Y")
    stack = _resolve_for_amd_gpus(kb, constraints, gpus)
    problem = rocm_refusal(kb, stack, facts)
    if problem:
        raise BadRequest(problem)
    return stack


def _amd_models(kb: KnowledgeBase, facts: HostFacts) -> list[AmdGpu]:
    """The knowledge base's rows of the host's AMD GPUs, oldest first (first ROCm, then gfx target)."""
    found = {row.name: row for g in facts.amd_gpus if g.model and (row := kb.find_amd_gpu(g.model))}
    return sorted(found.values(), key=lambda r: (V(r.min_rocm or "0"), r.gfx, r.name))


def _resolve_for_amd_gpus(kb: KnowledgeBase, constraints: Request, gpus: list[AmdGpu]) -> Stack:
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
            reasons = {**stack.reasons, "gpu": f"a mixed node: torch {stack.torch}+{stack.cuda_build} runs on {names}"}
            return replace(stack, gpu_gfx=None, arch_list=";".join(targets), reasons=reasons)
        problem = problem or f"torch {stack.torch}+{stack.cuda_build} {misfits[0]}"
    names = ", ".join(g.name for g in gpus)
    raise BadRequest(f"no one stack runs on all of this host's GPUs ({names}): {problem}")


def _rocm_misfit(kb: KnowledgeBase, stack: Stack, gpu: AmdGpu) -> str | None:
    """Why the stack's ROCm build cannot serve the GPU (no code for it, a ROCm older than its first), or None."""
    builds = kb.rocm_builds(stack.torch)
    code = builds.arch.get(stack.cuda_build, ()) if builds else ()
    if gpu.gfx not in code:
        return f"has no GPU code for {gpu.name} ({gpu.gfx})"
    if gpu.min_rocm is not None and V(str(stack.rocm)) < V(gpu.min_rocm):
        return f"is ROCm {stack.rocm}, and {gpu.name} needs ROCm ≥ {gpu.min_rocm}"
    return None


def rocm_refusal(kb: KnowledgeBase, stack: Stack, facts: HostFacts) -> str | None:
    """A ROCm stack: an OS the amdgpu role serves for that release, x86_64, GPU code and a ROCm new enough
    for every AMD GPU."""
    rocm = str(stack.rocm)
    os_refusal = rocm_os_refusal(kb, rocm, facts.os, facts.os_label)
    if os_refusal:
        return os_refusal
    if facts.architecture not in ROCM_ARCHITECTURES:
        return f"architecture {facts.architecture} has no amdgpu driver or ROCm (x86_64 only)"
    targets = stack.arch_list.split(";")
    build = f"torch {stack.torch}+{stack.cuda_build}"
    for gpu in facts.amd_gpus:
        if gpu.gfx and gpu.gfx not in targets:
            return f"{build} has no GPU code for {gpu.model} ({gpu.gfx}): built for {stack.arch_list}"
        row = kb.find_amd_gpu(gpu.model or "")
        if row and row.min_rocm and V(rocm) < V(row.min_rocm):
            return f"{build} cannot serve {gpu.model} ({gpu.gfx}): it needs ROCm ≥ {row.min_rocm}"
    return None
