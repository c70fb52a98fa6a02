"""`gpuenv resolve --fleet DIR` (or `--fleet-history DB`): the newest stack every host of a fleet runs.

The resolver's candidates for the request's own constraints, best first (gpuenv.resolve's ranking); each is
judged against every kind of host by `fleet compat`'s rules (gpuenv.fleet.compat_rules), and the first that
no host refuses is the stack. What it says beyond a plain resolution, in the Stack's own fields so that its
JSON stays a stack file build-image and provision take: `reasons["fleet"]` names the hosts that bind (those
that refuse the stack `resolve` would give without the fleet), `rejected` the newer stacks passed over, each
with the hosts that rule it out and why (drop them, or upgrade their drivers), `warnings` the caveats and
the hosts that could not be judged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from gpuenv.errors import BadRequest
from gpuenv.fleet.compat import CompatResult, Group, compressed, judged
from gpuenv.fleet.compat_rules import Judge
from gpuenv.fleet.fleet_hosts import Fleet, read_fleet
from gpuenv.fleet.source import FleetSource, OnHost
from gpuenv.kb import KnowledgeBase, load_kb
from gpuenv.platforms.registry import claims, for_request
from gpuenv.resolve.candidates import Candidate, candidates
from gpuenv.resolve.request import DEFAULT_OS, Request
from gpuenv.resolve.service import resolve
from gpuenv.stack import Rejected, Stack

MAX_ALTERNATIVES = 5


@dataclass(frozen=True)
class Tried:
    candidate: Candidate
    stack: Stack
    result: CompatResult

    @property
    def refused(self) -> list[Group]:
        return [g for g in self.result.groups() if g.state == "no"]


def resolve_for_fleet(kb_path: Path | None, request: Request, source: FleetSource) -> Stack:
    """The newest stack no host of the fleet refuses, with the hosts that bind and the stacks passed over."""
    kb = load_kb(kb_path)
    request, fleet, left_out = _platform(kb, request, read_fleet(source))
    platform = for_request(kb, request)
    os_info = kb.os_by_name.get((request.os or DEFAULT_OS).lower())
    if os_info is None:
        resolve(kb, request)  # its refusal, with resolve's hint
        raise AssertionError("unreachable: resolve refuses an unknown OS")
    resolution = platform.resolver.start(kb, request, os_info)
    survivors, _ = candidates(kb, request, os_info, resolution)
    if not survivors:
        resolve(kb, request)  # nothing fits the request itself: resolve's refusal says why
    passed: list[Tried] = []
    for candidate in sorted(survivors, key=resolution.rank, reverse=True):
        stack = resolution.stack(candidate, survivors, ())
        tried = Tried(candidate, stack, judged(Judge(kb, stack, _on_host(request)), fleet, strict=False))
        if not tried.refused:
            stack = _explained(tried, passed, len(fleet.hosts))
            return replace(stack, warnings=(*stack.warnings, *left_out))
        passed.append(tried)
    raise BadRequest(
        f"no stack runs on every host of the fleet ({len(fleet.hosts)} host(s)); the newest, {_choice(passed[0])}, "
        f"needs: {_needs(passed[0])}",
        hint="upgrade the drivers or leave out the hosts named (a fleet of several kinds: judge each part apart)",
    )


def _on_host(request: Request) -> OnHost | None:
    """How provision installs the stack (--for host), on each host's OS unless --os names one; None: an image."""
    if request.purpose == "image":
        return None
    return OnHost.resolved(request.os, request.python)


def _platform(kb: KnowledgeBase, request: Request, fleet: Fleet) -> tuple[Request, Fleet, tuple[str, ...]]:
    """The request on the platform of the fleet's GPUs when it names none (a fleet of two is refused), the fleet
    less the hosts whose GPUs are another platform's when it names one, and a warning naming those."""
    by: dict[str, set[str]] = {}
    for host in fleet.hosts:
        for gpu in host.report.gpus if host.report else ():
            by.setdefault(_platform_of(kb, gpu.code), set()).add(host.host)
    asked = claims(kb, request)  # --platform, --cuda, --rocm, a +build torch or an AMD --gpu
    if not asked and len(by) > 1:
        parts = "; ".join(f"{name}: {compressed(sorted(hosts))}" for name, hosts in by.items())
        raise BadRequest(
            f"the fleet's hosts need stacks of different platforms ({parts}): no one stack runs on all",
            hint=f"resolve for one part: --platform {' or --platform '.join(by)}",
        )
    name = next(iter(asked), next(iter(by), None))
    if name is None:
        return request, fleet, ()
    others = {h for platform, hosts in by.items() if platform != name for h in hosts}
    kept = Fleet(tuple(h for h in fleet.hosts if h.host not in others), fleet.skipped)
    said = (f"left out, their GPUs take another platform's stacks: {compressed(sorted(others))}",) if others else ()
    return (request if asked else replace(request, platform=name)), kept, said


def _platform_of(kb: KnowledgeBase, code: str | None) -> str:
    if code is None:
        return "unknown"
    try:
        return for_request(kb, Request(gpu=code)).name
    except BadRequest:
        return "unknown"


def _explained(chosen: Tried, passed: list[Tried], hosts: int) -> Stack:
    stack, result = chosen.stack, chosen.result
    reasons = dict(stack.reasons)
    reasons["torch"] = f"newest release every host of the fleet runs ({hosts} host(s))"
    reasons["fleet"] = (
        f"{_choice(passed[0])}, resolve's choice without the fleet, needs: {_needs(passed[0])}"
        if passed
        else f"every host of the fleet runs what resolve gives without it ({hosts} host(s))"
    )
    by_need: dict[str, Tried] = {}
    for tried in passed[1:]:  # the best-ranked stack of each different need
        by_need.setdefault(_needs(tried), tried)
    alternatives = tuple(Rejected(_choice(t), f"needs: {need}") for need, t in by_need.items())
    caveats = [f"{g.reason}: {compressed(g.hosts)}" for g in result.groups() if g.state == "caveat"]
    unknown = [
        f"not judged, the stack may not run there: {g.reason}: {compressed(g.hosts)}"
        for g in result.groups()
        if g.state == "unknown"
    ]
    warnings = (*stack.warnings, *caveats, *unknown)
    return replace(stack, reasons=reasons, rejected=alternatives[:MAX_ALTERNATIVES], warnings=warnings)


def _choice(tried: Tried) -> str:
    return f"torch {tried.stack.torch}+{tried.stack.build}"


def _needs(tried: Tried) -> str:
    """What a stack the fleet refuses would need: 'the driver ≥ 580.65.06 on h100-[001-004]; to leave out v100-001
    (its GPU code is …)'."""
    groups = tried.refused
    # the lowest driver that runs it; in an image a GeForce needs the CUDA's own (its cuda-compat serves no GeForce)
    floors = {"driver": tried.stack.driver_floor, "native driver": tried.stack.driver_min}
    said = []
    for constraint, floor in floors.items():
        upgrade = sorted({h for g in groups if g.constraint == constraint for h in g.hosts})
        said += [f"the driver ≥ {floor} on {compressed(upgrade)}"] if upgrade else []
    said += [f"to leave out {compressed(g.hosts)} ({g.reason})" for g in groups if g.constraint not in floors]
    return "; ".join(said)
