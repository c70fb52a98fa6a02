"""Per-host resolution: a stack for each host from its facts and the user's constraints. Pure.

The user's constraints (--torch, --cuda or --rocm, --driver, --python, --skip-driver's loaded driver, what
the wheelhouse holds) apply to every host; what they leave open comes from the host: its OS, and its GPUs,
whose platform (gpuenv.platforms.registry.for_host) resolves the stack for them — an AMD host gets torch's
ROCm build for its GPUs, an NVIDIA host the CUDA build, a host without a GPU the CPU build, each refused a
stack of another platform's GPUs. --os and --gpu are checks: a host that differs is refused. A pinned stack
(--stack) is checked against each host instead of resolved. Hosts whose facts resolve alike share one
resolution. A request no host could ever satisfy is a BadRequest before anything runs (`check_request`);
what only a host's facts rule out is a refusal of that host, with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from gpuenv.errors import BadRequest
from gpuenv.kb import KnowledgeBase
from gpuenv.platforms.base import Platform
from gpuenv.platforms.registry import Wanted, claims, for_host, for_stack, named, platform_of_build, platforms
from gpuenv.provision.hostfacts import GatheredHost
from gpuenv.resolve.request import Request
from gpuenv.resolve.service import resolve
from gpuenv.stack import Stack

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
    facts: GatheredHost
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
        platform = platform_of_build(wheels.build) if wheels.build else None
        cpu = platform is not None and platform.host.pci_vendor is None
        if wheels.build and platform is not None and platform.resolver.option not in given:
            given[platform.resolver.option] = platform.name if cpu else wheels.build
        if wheels.python and "python" not in given:
            given["python"] = wheels.python
        build = f"+{wheels.build}" if wheels.build else ""
        python = f", Python {wheels.python}" if wheels.python else ""
        notes.append(f"from the wheelhouse: torch {wheels.torch}{build}{python}")
    request = HostRequest(
        constraints=Request(
            **{k: v for k, v in given.items() if k not in ("os", "gpu")}, cpu_arch=constraints.cpu_arch
        ),
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


def plan_hosts(kb: KnowledgeBase, request: HostRequest, hosts: list[GatheredHost]) -> list[HostPlan]:
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


def _resolution_key(request: HostRequest, facts: GatheredHost) -> tuple[Any, ...]:
    codes = tuple(sorted({g.code or g.model or f"?{g.device_id}" for g in facts.gpus}))
    return facts.os, facts.architecture, codes, facts.driver if request.skip_driver else None


def _check_host(kb: KnowledgeBase, request: HostRequest, facts: GatheredHost) -> str | None:
    """Why the host is refused before any resolution: --os, --gpu, an OS gpuenv cannot serve, the GPUs of
    another platform than the stack's, an architecture the platform is not served on."""
    if facts.os is None:
        hosts = ", ".join(o.name for o in kb.os if "host" in o.roles)
        return f"{facts.distribution} {facts.version} is not an OS gpuenv provisions ({hosts})"
    try:
        for_host(facts, _wanted(kb, request))
    except BadRequest as exc:
        return exc.message
    if request.os_check and facts.os != request.os_check:
        return f"the host runs {facts.os}, --os asks for {request.os_check}"
    if request.gpu_check and not _has_wanted_gpus(kb, request.gpu_check, facts):
        return f"the host has {facts.gpu_label()}, --gpu asks for {request.gpu_check}"
    asked = request.constraints.cpu_arch
    if asked and asked != facts.architecture:  # both as `uname -m` names them (--cpu-arch's spelling is read first)
        return f"the host is {facts.architecture}, --cpu-arch asks for {asked}"
    return None


def _wanted(kb: KnowledgeBase, request: HostRequest) -> Wanted | None:
    """The platform every host is asked to take (a pinned stack's, or the one the options ask for), or None."""
    if request.pinned is not None:
        platform = for_stack(request.pinned)
        return Wanted(platform.name, f"a {platform.resolver.software(request.pinned)} stack needs")
    asked = claims(kb, request.constraints)
    if not asked:
        return None
    name, claim = next(iter(asked.items()))
    return Wanted(name, f"{claim.option} asks for a {named(name).label} stack, which needs")


def _has_wanted_gpus(kb: KnowledgeBase, gpu: str, facts: GatheredHost) -> bool:
    answers = (p.host.matches(kb, gpu, facts) for p in platforms())
    return next((a for a in answers if a is not None), False)


def _plan_one(kb: KnowledgeBase, request: HostRequest, facts: GatheredHost) -> HostPlan:
    asked = _wanted(kb, request)
    platform = for_host(facts, asked)
    warnings = [w for p in platforms() for w in p.host.warnings(facts, skip_driver=request.skip_driver)]
    warnings += _platform_warnings(request, facts, platform, asked)
    kept = platform.host.kept_driver(facts) if request.skip_driver else None
    if request.pinned is not None:
        refused = _pinned_refusal(kb, request.pinned, facts, platform, kept_driver=kept)
        return HostPlan(facts, None if refused else request.pinned, refused, tuple(warnings))
    constraints = replace(request.constraints, os=facts.os, cpu_arch=facts.architecture)
    if kept and not constraints.driver:
        constraints = replace(constraints, driver=kept)
    try:
        stack = platform.host.stack(kb, constraints, facts, resolve)
    except BadRequest as exc:
        return HostPlan(facts, refused=exc.message, warnings=tuple(warnings))
    return HostPlan(facts, stack, None, tuple([*warnings, *stack.warnings]))


def _platform_warnings(
    request: HostRequest, facts: GatheredHost, platform: Platform, asked: Wanted | None
) -> list[str]:
    """A stack that serves none of the host's GPUs (the CPU build) says why."""
    if platform.host.pci_vendor is not None:
        return []
    if facts.gpus:
        why = "the wheelhouse holds torch's CPU build" if request.cpu_wheels else "asked for; the GPUs stay unused"
        return [f"a {platform.label} stack: {why}"]
    if asked is None:
        vendors = " or ".join(p.host.vendor for p in platforms() if p.host.pci_vendor is not None)
        return [f"a {platform.label} stack: no {vendors} GPU on the PCI bus"]
    return []


def _pinned_refusal(
    kb: KnowledgeBase, stack: Stack, facts: GatheredHost, platform: Platform, *, kept_driver: str | None
) -> str | None:
    """Why a pinned stack cannot serve this host (its CPU, its OS's Pythons, its GPUs, a kept driver), or None."""
    if platform.cpu_arch.name != stack.cpu_arch:  # torch's wheels and their GPU code differ per architecture
        return f"the stack is for {stack.cpu_arch}, the host is {platform.cpu_arch.name}"
    os_info = kb.os_by_name.get(facts.os or "")
    if os_info is not None and stack.python not in os_info.python:
        return f"{facts.os} has no known way to provide Python {stack.python} (has {', '.join(os_info.python)})"
    return platform.host.refusal(kb, stack, facts, kept_driver)
