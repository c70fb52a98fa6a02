"""Per-host resolution: a stack for each host from its facts and the user's constraints. Pure.

The user's constraints (--torch, --cuda or --rocm, --driver, --python, --skip-driver's loaded driver, what
the wheelhouse holds) apply to every host; what they leave open comes from the host (its OS, its GPUs:
an AMD host gets torch's ROCm build for its GPUs, an NVIDIA host the CUDA build, each refused the other's).
--os and --gpu are checks: a host that differs is refused. A pinned stack (--stack) is checked
against each host instead of resolved. Hosts whose facts resolve alike share one resolution.
A request no host could ever satisfy is a BadRequest before anything runs (`check_request`); what
only a host's facts rule out is a refusal of that host, with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from gpuenv.compat import KnowledgeBase, driver_runs_cuda, gpu_code_for
from gpuenv.errors import BadRequest
from gpuenv.provision.hostfacts import ARCHITECTURES, HostFacts
from gpuenv.provision.rocmhosts import asked_platform_refusal, rocm_host_stack, rocm_refusal
from gpuenv.resolve import Request, resolve
from gpuenv.resolve_rocm import amd_target
from gpuenv.stack import CPU_BUILD, NONE, Stack

_TORCH_WHEEL = re.compile(r"torch-(\d+(?:\.\d+)+)(?:(?:\+|%2[bB])([a-z0-9.]+))?-cp(\d)(\d+)-", re.ASCII)


@dataclass(frozen=True)
class WheelhouseTorch:
    """What a wheelhouse says about the stack: its torch release, build and Python, and what it lacks."""

    torch: str | None = None
    build: str | None = None  # "cpu", "cu130", "rocm6.4"; None: a plain PyPI wheel
    python: str | None = None  # set when every torch wheel is for one Python
    has_torchvision: bool = False
    has_torchaudio: bool = False


def wheelhouse_torch(names: list[str]) -> WheelhouseTorch:
    """Read the torch wheels' file names: torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl."""
    found = [m for n in names if (m := _TORCH_WHEEL.match(n))]
    releases = {m.group(1) for m in found}
    if len(releases) > 1:
        raise BadRequest(
            f"the wheelhouse holds several torch releases ({', '.join(sorted(releases))})",
            hint="give --torch VERSION to choose one, or keep one release in the wheelhouse",
        )
    builds = {m.group(2) for m in found}
    pythons = {f"{m.group(3)}.{m.group(4)}" for m in found}
    return WheelhouseTorch(
        torch=releases.pop() if releases else None,
        build=builds.pop() if len(builds) == 1 else None,
        python=pythons.pop() if len(pythons) == 1 else None,
        has_torchvision=any(n.startswith("torchvision-") for n in names),
        has_torchaudio=any(n.startswith("torchaudio-") for n in names),
    )


@dataclass(frozen=True)
class HostRequest:
    """What every host's stack must satisfy."""

    constraints: Request = field(default_factory=Request)  # torch, cuda or rocm, driver, python (os/gpu are checks)
    os_check: str | None = None
    gpu_check: str | None = None
    pinned: Stack | None = None
    skip_driver: bool = False  # the loaded driver becomes a constraint
    cpu_wheels: bool = False  # the wheelhouse holds torch's +cpu build only
    torch_only: bool = False  # torchvision and torchaudio left out of every stack


@dataclass(frozen=True)
class HostPlan:
    facts: HostFacts
    stack: Stack | None = None
    refused: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def host(self) -> str:
        return self.facts.host


def request_from(
    constraints: Request,
    *,
    wheels: WheelhouseTorch | None,
    skip_driver: bool,
    pinned: Stack | None,
    torch_only: bool = False,
) -> tuple[HostRequest, list[str]]:
    """The per-host request, and notes on what came from where (the wheelhouse's constraints)."""
    notes: list[str] = []
    given = constraints.given()
    cpu = False
    if wheels is not None and wheels.torch and pinned is None and "torch" not in given:
        given["torch"] = wheels.torch
        cpu = wheels.build == CPU_BUILD
        platform = "rocm" if wheels.build and wheels.build.startswith("rocm") else "cuda"
        if wheels.build and not cpu and platform not in given:
            given[platform] = wheels.build
        if wheels.python and "python" not in given:
            given["python"] = wheels.python
        build = f"+{wheels.build}" if wheels.build else ""
        python = f", Python {wheels.python}" if wheels.python else ""
        notes.append(f"from the wheelhouse: torch {wheels.torch}{build}{python}")
    request = HostRequest(
        constraints=Request(**{k: v for k, v in given.items() if k not in ("os", "gpu")}),
        os_check=given.get("os"),
        gpu_check=given.get("gpu"),
        pinned=pinned,
        skip_driver=skip_driver,
        cpu_wheels=cpu,
        torch_only=torch_only,
    )
    return request, notes


def check_request(kb: KnowledgeBase, request: HostRequest) -> Stack:
    """Exit 2 for a request no host could satisfy (it resolves on no host OS of the knowledge base);
    else a stack some host would get, to check the request's other options against."""
    if request.pinned is not None:
        return request.pinned
    oses = [request.os_check] if request.os_check else [o.name for o in kb.os if "host" in o.roles]
    gpu = request.gpu_check
    problem: BadRequest | None = None
    for name in oses:
        try:
            return resolve(kb, replace(request.constraints, os=name, gpu=gpu))
        except BadRequest as exc:
            problem = problem or exc
    assert problem is not None
    if request.os_check:
        raise problem
    given = ", ".join(f"--{k} {v}" for k, v in {**request.constraints.given(), "gpu": gpu}.items() if v)
    raise BadRequest(f"no stack satisfies {given} on any OS gpuenv provisions ({', '.join(oses)})", hint=problem.hint)


def plan_hosts(kb: KnowledgeBase, request: HostRequest, hosts: list[HostFacts]) -> list[HostPlan]:
    """A stack (or a refusal) for each host; hosts that resolve alike share the resolution."""
    memo: dict[Any, HostPlan] = {}
    plans = []
    for facts in hosts:
        refused = _check_host(kb, request, facts)
        if refused:
            plans.append(HostPlan(facts, refused=refused))
            continue
        key = _resolution_key(request, facts)
        if key not in memo:
            memo[key] = (
                _torch_only(_plan_one(kb, request, facts)) if request.torch_only else _plan_one(kb, request, facts)
            )
        plans.append(replace(memo[key], facts=facts))
    return plans


def _torch_only(plan: HostPlan) -> HostPlan:
    """The stack without torchvision and torchaudio, and without warnings about them."""
    if plan.stack is None:
        return plan
    stack = replace(plan.stack, torchvision=None, torchaudio=None)
    warnings = tuple(w for w in plan.warnings if "torchvision" not in w and "torchaudio" not in w)
    stack = replace(stack, warnings=tuple(w for w in stack.warnings if w in warnings))
    return replace(plan, stack=stack, warnings=warnings)


def _resolution_key(request: HostRequest, facts: HostFacts) -> tuple[Any, ...]:
    sms = tuple(sorted({g.sm or g.model or f"?{g.device_id}" for g in facts.gpus}))
    return facts.os, sms, facts.driver if request.skip_driver else None


def _check_host(kb: KnowledgeBase, request: HostRequest, facts: HostFacts) -> str | None:
    """Why the host is refused before any resolution: --os, --gpu, an OS or architecture gpuenv cannot serve,
    GPUs of the other vendor than the stack's."""
    if facts.os is None:
        hosts = ", ".join(o.name for o in kb.os if "host" in o.roles)
        return f"{facts.distribution} {facts.version} is not an OS gpuenv provisions ({hosts})"
    if facts.architecture not in ARCHITECTURES:
        return f"architecture {facts.architecture} has no NVIDIA driver (x86_64, aarch64)"
    if request.os_check and facts.os != request.os_check:
        return f"the host runs {facts.os}, --os asks for {request.os_check}"
    if request.gpu_check and not _has_wanted_gpus(kb, request.gpu_check, facts):
        return f"the host has {facts.gpu_label()}, --gpu asks for {request.gpu_check}"
    return _vendor_refusal(request, facts)


def _has_wanted_gpus(kb: KnowledgeBase, gpu: str, facts: HostFacts) -> bool:
    amd = amd_target(kb, gpu)
    if amd is not None:
        by_gfx = gpu.lower() == amd.gfx
        return bool(facts.gpus) and all(
            g.is_amd and (g.gfx == amd.gfx if by_gfx else g.model == amd.name) for g in facts.gpus
        )
    wanted = _wanted_sm(kb, gpu)
    return bool(facts.gpus) and all(not g.is_amd and g.sm == wanted for g in facts.gpus)


def _vendor_refusal(request: HostRequest, facts: HostFacts) -> str | None:
    """A host with both vendors' GPUs, a ROCm stack (pinned, or asked for) on NVIDIA GPUs, a CUDA stack (pinned,
    or asked for) on AMD GPUs."""
    amd, nvidia = facts.amd_gpus, facts.nvidia_gpus
    if amd and nvidia:
        return f"{facts.host}: the host mixes NVIDIA and AMD GPUs ({facts.gpu_label()}); gpuenv installs one driver"
    pinned = request.pinned
    if pinned is not None and pinned.platform == "rocm":
        return _platform_refusal(facts, pinned) if nvidia else None
    if request.cpu_wheels or (pinned is not None and pinned.cpu_only):
        return None
    if pinned is not None:
        return _platform_refusal(facts, pinned) if amd else None
    return asked_platform_refusal(request.constraints, facts)


def _platform_refusal(facts: HostFacts, stack: Stack) -> str:
    """One line naming the host and what was found: a ROCm stack on NVIDIA GPUs, a CUDA stack on AMD GPUs."""
    if stack.platform == "rocm":
        return (
            f"{facts.host}: a ROCm {stack.rocm} stack needs AMD Instinct GPUs, "
            f"but the host has {facts.gpu_label(facts.nvidia_gpus)}"
        )
    return (
        f"{facts.host}: a CUDA {stack.cuda} stack needs NVIDIA GPUs, but the host has {facts.gpu_label(facts.amd_gpus)}"
    )


def _wanted_sm(kb: KnowledgeBase, gpu: str) -> str | None:
    if gpu.lower().startswith("sm_"):
        digits = gpu[3:]
        return f"{digits[:-1]}.{digits[-1]}"
    found = kb.find_gpu(gpu)
    return found.sm if found else None


def _plan_one(kb: KnowledgeBase, request: HostRequest, facts: HostFacts) -> HostPlan:
    warnings = _fact_warnings(request, facts)
    if request.pinned is not None:
        refused = pinned_refusal(kb, request.pinned, facts, kept_driver=_kept_driver(request, facts))
        return HostPlan(facts, None if refused else request.pinned, refused, tuple(warnings))
    constraints = replace(request.constraints, os=facts.os)
    kept = _kept_driver(request, facts)
    if kept and not constraints.driver:
        constraints = replace(constraints, driver=kept)
    if facts.amd_gpus and not request.cpu_wheels:
        try:
            stack = rocm_host_stack(kb, constraints, facts)
        except BadRequest as exc:
            return HostPlan(facts, refused=exc.message, warnings=tuple(warnings))
        return HostPlan(facts, stack, None, tuple([*warnings, *stack.warnings]))
    sms = sorted({g.sm for g in facts.gpus if g.sm}, key=lambda sm: tuple(int(p) for p in sm.split(".")))
    cpu = request.cpu_wheels or (not facts.gpus and not request.constraints.cuda and not request.constraints.rocm)
    try:
        stack = _resolve_for_gpus(kb, constraints, [] if cpu else sms)
    except BadRequest as exc:
        return HostPlan(facts, refused=exc.message, warnings=tuple(warnings))
    if cpu:
        stack = cpu_stack(kb, stack)
        why = "the wheelhouse holds torch's CPU build" if request.cpu_wheels else "no NVIDIA GPU on the PCI bus"
        if facts.gpus or not request.cpu_wheels:
            warnings.append(f"a CPU stack: {why}")
    return HostPlan(facts, stack, None, tuple([*warnings, *stack.warnings]))


def _resolve_for_gpus(kb: KnowledgeBase, constraints: Request, sms: list[str]) -> Stack:
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
                "gpu": f"a mixed node: torch {stack.torch}+{stack.cuda_build} runs on {', '.join(sms)}",
            }
            return replace(stack, gpu_sm=None, arch_list=";".join(sms), reasons=reasons)
        problem = f"torch {stack.torch}+{stack.cuda_build} has no GPU code for sm_{missing[0].replace('.', '')}"
    raise BadRequest(f"no one stack runs on all of this host's GPUs ({', '.join(sms)}): {problem}")


def _build_runs_on(kb: KnowledgeBase, stack: Stack, sm: str) -> bool:
    release = next((t for t in kb.torch if t.version == stack.torch), None)
    code = release.arch.get(stack.cuda_build) if release else None
    return code is not None and gpu_code_for(code, sm) is not None


def cpu_stack(kb: KnowledgeBase, stack: Stack) -> Stack:
    """The same torch release and Python as torch's CPU build: no CUDA, no driver, no GPU code."""
    reasons = {k: v for k, v in stack.reasons.items() if k in ("torch", "python", "os")}
    reasons["cuda_build"] = "torch's CPU build: no NVIDIA GPU to serve, or the wheelhouse holds the CPU wheels"
    return replace(
        stack,
        cuda=NONE,
        cuda_build=CPU_BUILD,
        cudnn=None,
        base_images={},
        index_url=kb.index_url(CPU_BUILD),
        driver_min=NONE,
        driver_floor=NONE,
        driver_branch=NONE,
        gpu_sm=None,
        arch_list=NONE,
        base_image_eol=False,
        reasons=reasons,
        rejected=(),
        warnings=tuple(w for w in stack.warnings if "CUDA" not in w and "nvidia/cuda" not in w),
    ).validate()


def _kept_driver(request: HostRequest, facts: HostFacts) -> str | None:
    return facts.driver if request.skip_driver and facts.nvidia_gpus else None


def _fact_warnings(request: HostRequest, facts: HostFacts) -> list[str]:
    out = [
        f"unknown NVIDIA device 10de:{g.device_id}: not in the device-id table" for g in facts.nvidia_gpus if not g.sm
    ]
    out += [f"unknown AMD device 1002:{g.device_id}: not in the device-id table" for g in facts.amd_gpus if not g.gfx]
    if request.skip_driver and facts.nvidia_gpus and not facts.driver:
        out.append("--skip-driver, but no NVIDIA driver is loaded: the GPUs stay unusable")
    return out


def pinned_refusal(kb: KnowledgeBase, stack: Stack, facts: HostFacts, *, kept_driver: str | None) -> str | None:
    """Why a pinned stack cannot serve this host (its OS's Pythons, its GPUs, a kept driver), or None."""
    os_info = kb.os_by_name.get(facts.os or "")
    if os_info is not None and stack.python not in os_info.python:
        return f"{facts.os} has no known way to provide Python {stack.python} (has {', '.join(os_info.python)})"
    if stack.platform == "rocm":
        return rocm_refusal(kb, stack, facts)
    if not stack.cpu_only:
        for gpu in facts.gpus:
            if gpu.sm and not _build_runs_on(kb, stack, gpu.sm):
                sm = gpu.sm.replace(".", "")
                return f"torch {stack.torch}+{stack.cuda_build} has no GPU code for {gpu.model} (sm_{sm})"
        if kept_driver:
            verdict = driver_runs_cuda(kb, kept_driver, stack.cuda_build)
            if not verdict.ok:
                return f"the loaded driver, kept by --skip-driver, cannot run the stack: {verdict.message}"
    return None


def stack_label(stack: Stack) -> str:
    """'torch 2.13.0+cpu, Python 3.11' for tables."""
    return f"torch {stack.torch}+{stack.cuda_build}, Python {stack.python}"
