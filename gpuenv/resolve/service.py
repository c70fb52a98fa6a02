"""The resolver: from any subset of constraints to one fully pinned Stack, with its reasons.

Pure: takes a KnowledgeBase and a Request, returns a Stack or raises BadRequest naming the nearest
valid choices. The request's platform is chosen once (gpuenv.platforms.registry.for_request); its
candidates are every (torch release, build, Python) the knowledge base allows on the OS, each
constraint filtering them with a reason, and the survivors are ranked: with no --torch, releases fit
for a default first, then the newest torch, then the platform's own preferences.
"""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

from gpuenv.errors import BadRequest
from gpuenv.kb import KnowledgeBase, OsInfo
from gpuenv.platforms.registry import for_build, for_request
from gpuenv.resolve.candidates import candidates
from gpuenv.resolve.ranking import best
from gpuenv.resolve.reasons import nearby, no_stack_message, refusals, release_lines
from gpuenv.resolve.request import DEFAULT_OS, Purpose, Request, torch_matches
from gpuenv.stack import Stack


def resolve(kb: KnowledgeBase, request: Request) -> Stack:
    return _resolve(kb, request, explain=True)


def _resolve(kb: KnowledgeBase, request: Request, *, explain: bool) -> Stack:
    """explain: work out what fits nearby when nothing fits (the relaxed requests that do so need not)."""
    if request.purpose not in get_args(Purpose):
        raise ValueError(f"a stack is for an image or a host, not {request.purpose!r}")
    if request.torch and "+" in request.torch:
        request = for_build(kb, request)
    os_info = _os(kb, request.os or DEFAULT_OS)
    if request.torch and not any(torch_matches(t.version, request.torch) for t in kb.torch):
        raise BadRequest(f"unknown torch version {request.torch}", hint=f"known: {release_lines(kb)}")
    platform = for_request(kb, request)
    request = replace(request, cpu_arch=platform.cpu_arch.name)
    published = kb.for_cpu_arch(platform.cpu_arch.name)  # the releases' builds as published for it
    kb = published or kb
    resolution = platform.resolver.start(kb, request, os_info)
    survivors, refused = candidates(kb, request, os_info, resolution)
    if not survivors:
        message = f"{no_stack_message(request)}: {refusals(refused, request, resolution)}"
        hint = "; ".join(t for t in _nearest(kb, request, platform.name, resolution.hints()) if t) if explain else ""
        raise BadRequest(message, hint=hint or "relax a constraint; see gpuenv matrix")
    chosen = best(survivors, resolution)
    stack = resolution.stack(chosen, survivors, tuple(nearby(refused, chosen, survivors, resolution)))
    caveat = None if published else platform.cpu_arch.caveat
    return replace(stack, warnings=(*stack.warnings, caveat)) if caveat else stack


def _os(kb: KnowledgeBase, name: str) -> OsInfo:
    info = kb.os_by_name.get(name.lower())
    if info is None:
        raise BadRequest(f"unknown OS {name!r}", hint=f"known: {', '.join(kb.os_by_name)}")
    return info


def _nearest(kb: KnowledgeBase, request: Request, platform: str, hints: list[str]) -> list[str]:
    """What each constraint allows with the others relaxed (on the same platform, unless --platform is the
    one relaxed), like pip-tools' 'tried' list; then the platform's own hints."""
    given = request.given()
    tried = [_for_a_host(kb, request)] if request.purpose == "image" else []
    for name in given:
        if name == "os" and len(given) > 1:
            continue
        kept = {k: v for k, v in given.items() if k != name}
        on = {"platform": platform} if name != "platform" else {}
        relaxed = Request(**{**kept, **on}, purpose=request.purpose, cpu_arch=request.cpu_arch)
        try:
            stack = _resolve(kb, relaxed, explain=False)
        except BadRequest:
            continue
        said = ", ".join(f"{k} {v}" for k, v in kept.items()) or "no constraints"
        tried.append(f"without --{name}: torch {stack.torch}+{stack.build} ({said})")
    return tried + hints


def _for_a_host(kb: KnowledgeBase, request: Request) -> str:
    """When only images were missing: what a host gets (provision installs wheels, no image needed)."""
    try:
        stack = _resolve(kb, replace(request, purpose="host"), explain=False)
    except BadRequest:
        return ""
    return f"a host needs no image: provision (and resolve --for host) gets torch {stack.torch}+{stack.build}"
