"""The ROCm side of the resolver: torch's +rocm wheels for AMD GPUs, from the same Request as CUDA's.

A request is for ROCm when it gives --rocm, a torch version with a +rocm local tag, or an AMD --gpu
(MI300X, or an LLVM target such as gfx942). Candidates are every (torch release, ROCm build, Python)
the knowledge base allows on the OS; constraints filter them with a reason, and the survivors are
ranked like CUDA's: releases fit for a default first, then the newest torch, a confirmed build, the
newest ROCm. Pure: BadRequest names the constraint that failed and what would fit instead.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import NamedTuple

from gpuenv.compat import (
    AmdGpu,
    KnowledgeBase,
    OsInfo,
    Provenance,
    RocmRelease,
    TorchRelease,
    TorchRocm,
    V,
    rocm_os_row,
    rocm_os_warning,
)
from gpuenv.errors import BadRequest
from gpuenv.resolve_request import Request, numpy_requirement, pick_python, python_problem, torch_matches
from gpuenv.stack import AMDGPU_BRANCH_PREFIX, NONE, Rejected, Stack

_GFX = re.compile(r"gfx[0-9a-f]{3,4}", re.ASCII)


class RocmCandidate(NamedTuple):
    torch: TorchRelease
    builds: TorchRocm
    rocm: RocmRelease
    python: str


class RocmRefused(NamedTuple):
    torch: TorchRelease
    choice: str
    constraint: str
    why: str


def amd_target(kb: KnowledgeBase, gpu: str) -> AmdGpu | None:
    """The AMD GPU --gpu names: a model (MI300X) or an LLVM target (gfx942, which the KB's GPUs must know)."""
    found = kb.find_amd_gpu(gpu)
    if found is not None or not _GFX.fullmatch(gpu.lower()):
        return found
    same = [g for g in kb.amd_gpus if g.gfx == gpu.lower()]
    if not same:
        return None
    floors = [V(g.min_rocm) for g in same if g.min_rocm is not None]
    least = str(min(floors)) if len(floors) == len(same) else None
    return AmdGpu(gpu.lower(), gpu.lower(), (), (), least, Provenance("amd-gpu-specs", same[0].provenance.checked))


def wants_rocm(kb: KnowledgeBase, request: Request) -> bool:
    """Whether the request is for torch's ROCm wheels: --rocm, or an AMD --gpu."""
    return request.rocm is not None or (request.gpu is not None and amd_target(kb, request.gpu) is not None)


def split_rocm_build(kb: KnowledgeBase, request: Request, version: str, build: str) -> Request:
    """--torch 2.6.0+rocm6.2.4 is --torch 2.6.0 --rocm 6.2.4 (refused if --rocm or --cuda says otherwise)."""
    row = kb.rocm_by_build.get(build)
    if row is None:
        known = ", ".join(r.build for r in kb.rocm) or "none"
        raise BadRequest(f"unknown ROCm build {build} in torch version {request.torch}", hint=f"known builds: {known}")
    if request.cuda:
        raise BadRequest(
            f"--torch {request.torch} is a ROCm build, but --cuda asks for CUDA {request.cuda}",
            hint=f"drop --cuda, or ask for --torch {version}",
        )
    if request.rocm and row not in kb.rocm_matching(request.rocm):
        raise BadRequest(
            f"--torch {request.torch} names build {build}, but --rocm asks for {request.rocm}",
            hint=f"drop --rocm, or ask for --torch {version}",
        )
    return replace(request, torch=version, rocm=row.version)


def resolve_rocm(kb: KnowledgeBase, request: Request, os_info: OsInfo) -> Stack:
    amd = _checked_inputs(kb, request)
    survivors, refused = _candidates(kb, request, os_info, amd)
    if not survivors:
        given = ", ".join(f"--{k} {v}" for k, v in request.given().items())
        hint = "; ".join(filter(None, (_for_a_host(kb, request, os_info), _nearest(kb, request, amd))))
        raise BadRequest(f"no stack satisfies {given}: {_refusals(refused, request)}", hint=hint)
    best = max(survivors, key=lambda c: _rank(c, request))
    return _stack(kb, best, request, os_info, amd, survivors, refused)


# --- inputs ------------------------------------------------------------------------------------


def _checked_inputs(kb: KnowledgeBase, request: Request) -> AmdGpu | None:
    """The AMD GPU asked for, once the request is known not to mix CUDA's options with ROCm's."""
    amd = amd_target(kb, request.gpu) if request.gpu else None
    if request.cuda and request.rocm:
        raise BadRequest(
            f"--cuda {request.cuda} and --rocm {request.rocm} exclude each other",
            hint="a stack is torch's CUDA wheels (NVIDIA) or its ROCm wheels (AMD): give one of them",
        )
    if amd is not None and request.cuda:
        raise BadRequest(
            f"--gpu {request.gpu} is an AMD GPU ({amd.gfx}): it runs torch's ROCm builds, not --cuda {request.cuda}",
            hint="drop --cuda (and give --rocm X.Y if a ROCm release matters)",
        )
    if request.gpu and amd is None:
        raise BadRequest(
            f"--gpu {request.gpu} is not an AMD GPU the knowledge base knows, and --rocm asks for ROCm",
            hint=f"AMD GPUs: {', '.join(g.name for g in kb.amd_gpus)}, or their gfx targets; drop --rocm for NVIDIA",
        )
    if request.driver:
        raise BadRequest(
            f"--driver {request.driver} is an NVIDIA driver version; a ROCm stack runs on AMD's amdgpu driver",
            hint="drop --driver",
        )
    if request.rocm and not kb.rocm_matching(request.rocm):
        raise BadRequest(f"unknown ROCm version {request.rocm}", hint=f"known: {', '.join(r.version for r in kb.rocm)}")
    return amd


# --- candidates and their filters ---------------------------------------------------------------


def _candidates(
    kb: KnowledgeBase, request: Request, os_info: OsInfo, amd: AmdGpu | None
) -> tuple[list[RocmCandidate], list[RocmRefused]]:
    survivors: list[RocmCandidate] = []
    refused: list[RocmRefused] = []
    wanted = kb.rocm_matching(request.rocm) if request.rocm else tuple(kb.rocm)
    for torch in kb.torch:
        if request.torch and not torch_matches(torch.version, request.torch):
            continue
        builds = kb.rocm_builds(torch.version)
        usable = [kb.rocm_by_build[b] for b in (builds.arch if builds else ())]
        if builds is None or not any(r in wanted for r in usable):
            made = f"built for {', '.join(r.build for r in usable)}" if usable else "no ROCm build known"
            refused.append(RocmRefused(torch, f"torch {torch.version}", "rocm", made))
            continue
        for rocm in (r for r in usable if r in wanted):
            name = f"torch {torch.version}+{rocm.build}"
            failed = _why_not(builds, rocm, request, os_info, amd)
            python = None if failed else pick_python(torch, os_info, request.python)
            if failed is None and python is None:
                failed = ("python", python_problem(torch, os_info, request.python))
            if failed is not None or python is None:
                refused.append(RocmRefused(torch, name, *(failed or ("python", ""))))
                continue
            survivors.append(RocmCandidate(torch, builds, rocm, python))
    return survivors, refused


def _why_not(
    builds: TorchRocm, rocm: RocmRelease, request: Request, os_info: OsInfo, amd: AmdGpu | None
) -> tuple[str, str] | None:
    """The constraint that rules this ROCm build out and why, or None when it can be used."""
    if rocm_os_row(rocm, os_info) is None:
        return "os", f"AMD supports ROCm {rocm.version} on {', '.join(rocm.os)}, not {os_info.name}"
    if request.purpose == "image" and "image" in os_info.roles and os_info.name not in rocm.images:
        return "os", f"no rocm/dev image of ROCm {rocm.release} for {os_info.name}"
    if amd is not None and amd.min_rocm is not None and V(rocm.version) < V(amd.min_rocm):
        return "gpu", f"{amd.name} ({amd.gfx}) needs ROCm ≥ {amd.min_rocm}, and {rocm.build} is ROCm {rocm.version}"
    code = builds.arch[rocm.build]
    if amd is not None and amd.gfx not in code:
        return "gpu", f"{rocm.build}'s GPU code is {_span(code)}: no kernels for {amd.name} ({amd.gfx})"
    return None


def _rank(c: RocmCandidate, request: Request) -> tuple[bool, object, bool, object]:
    """Like CUDA's ranking: fit for a default (when no --torch), newest torch, confirmed build, newest ROCm."""
    confirmed = c.builds.build_confirmed(c.rocm.build)
    default_fit = request.torch is not None or (confirmed and c.torch.torchvision is not None)
    return default_fit, V(c.torch.version), confirmed, V(c.rocm.version)


def _span(code: tuple[str, ...]) -> str:
    return ";".join(code)


# --- the result -------------------------------------------------------------------------------


def _stack(
    kb: KnowledgeBase,
    best: RocmCandidate,
    request: Request,
    os_info: OsInfo,
    amd: AmdGpu | None,
    survivors: list[RocmCandidate],
    refused: list[RocmRefused],
) -> Stack:
    torch, builds, rocm, python = best
    return Stack(
        torch=torch.version,
        torchvision=torch.torchvision,
        torchaudio=torch.torchaudio,
        cuda=NONE,
        cuda_build=rocm.build,
        cudnn=None,
        python=python,
        python_source=os_info.python[python],
        os=os_info.name,
        base_images=base_images(rocm, os_info),
        index_url=kb.index_url(rocm.build),
        numpy=numpy_requirement(torch.version),
        driver_min=NONE,
        driver_floor=NONE,
        driver_branch=AMDGPU_BRANCH_PREFIX + rocm.version,
        gpu_sm=None,
        arch_list=amd.gfx if amd is not None else ";".join(builds.arch[rocm.build]),
        base_image_eol=False,
        reasons=_reasons(best, request, os_info, amd, survivors),
        rejected=tuple(_nearby(refused, best, survivors, request)),
        warnings=tuple(_warnings(best, request, os_info, amd)),
        rocm=rocm.version,
        gpu_gfx=amd.gfx if amd is not None else None,
    )


def base_images(rocm: RocmRelease, os_info: OsInfo) -> dict[str, str]:
    """AMD's rocm/dev-* images: the ROCm user space (with hipcc) for runtime, every ROCm library for devel."""
    if "image" not in os_info.roles or os_info.name not in rocm.images:
        return {}
    name = re.sub(r"^([a-z]+)", r"\1-", os_info.name)  # ubuntu24.04 -> ubuntu-24.04
    return {"runtime": f"rocm/dev-{name}:{rocm.release}", "devel": f"rocm/dev-{name}:{rocm.release}-complete"}


def _reasons(
    best: RocmCandidate, request: Request, os_info: OsInfo, amd: AmdGpu | None, survivors: list[RocmCandidate]
) -> dict[str, str]:
    torch, builds, rocm, python = best
    constraints = ", ".join(f"{k} {v}" for k, v in request.given().items())
    usable = sorted({c.rocm.build for c in survivors if c.torch is torch}, key=lambda b: V(b.removeprefix("rocm")))
    reasons = {
        "torch": f"newest release with ROCm wheels that satisfies {constraints}",
        "cuda_build": f"{rocm.build} among this release's usable ROCm builds ({', '.join(usable)}); newest ROCm first",
        "rocm": (
            f"ROCm {rocm.version}: the wheels bundle its user-space libraries; images use rocm/dev-* {rocm.release}"
        ),
        "python": f"Python {python} via {os_info.python[python].via}: {os_info.python[python].note}",
        "os": f"{os_info.name}"
        + (" (default)" if request.os is None else " (requested)")
        + f"; AMD supports ROCm {rocm.version} on it"
        + ("" if (row := rocm_os_row(rocm, os_info)) == os_info.name else f" as {row}"),
        "driver_branch": f"AMD's amdgpu driver repository of ROCm {rocm.version}",
        "arch_list": "PYTORCH_ROCM_ARCH for extensions: "
        + (f"the GPU's own target, {amd.gfx}" if amd else "every target the release's wheels carry"),
    }
    if amd is not None:
        code = builds.arch[rocm.build]
        reasons["gpu"] = f"{amd.name} ({amd.gfx}) runs torch {torch.version}+{rocm.build} ({_span(code)})"
    return reasons


def _warnings(best: RocmCandidate, request: Request, os_info: OsInfo, amd: AmdGpu | None) -> list[str]:
    torch, builds, rocm, _ = best
    out = [
        f"unconfirmed fact: torch {torch.version} ROCm {item.replace(':', ' ')} ({builds.provenance.source})"
        for item in builds.provenance.unconfirmed
        if item in ("builds", f"build:{rocm.build}", f"arch:{rocm.build}")
    ]
    image_facts = ("images", "release") if "image" in os_info.roles else ()
    out += [
        f"unconfirmed fact: ROCm {rocm.version} {item} ({rocm.provenance.source})"
        for item in rocm.provenance.unconfirmed
        if item == "os" or item in image_facts
    ]
    if amd is not None:
        out += [f"unconfirmed fact: {amd.name} {item}" for item in amd.provenance.unconfirmed]
    if (served_as := rocm_os_warning(rocm, os_info)) is not None:
        out.append(served_as)
    if torch.torchvision is None:
        out.append(f"torchvision has no release for torch {torch.version} yet: the stack pins torch without it")
    if request.torch is None and not _rank(best, request)[0]:
        out.append(f"torch {torch.version}+{rocm.build} is not settled (unconfirmed build), but nothing else fits")
    if os_info.python[best.python].via == "deadsnakes":
        out.append(f"Python {best.python} on {os_info.name} comes from the deadsnakes PPA, a third-party repository")
    return out


def _nearby(
    refused: list[RocmRefused], best: RocmCandidate, survivors: list[RocmCandidate], request: Request
) -> list[Rejected]:
    """The alternatives worth showing, nearest first: the chosen release's other builds, then newer releases."""
    chosen = V(best.torch.version)
    passed_over = [
        (c.torch, Rejected(f"torch {c.torch.version}+{c.rocm.build}", _ranked_below(c, best, request)))
        for c in survivors
        if c != best and V(c.torch.version) >= chosen
    ]
    ruled_out = [(r.torch, Rejected(r.choice, r.why)) for r in refused if V(r.torch.version) >= chosen]
    return [r for _, r in sorted(passed_over + ruled_out, key=lambda pair: V(pair[0].version))][:8]


def _ranked_below(c: RocmCandidate, best: RocmCandidate, request: Request) -> str:
    words = ("not settled: give --torch to use it", "an older release", "its build is unconfirmed", "an older ROCm")
    mine, theirs = _rank(c, request), _rank(best, request)
    lost = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b), len(words) - 1)
    return f"usable, but {words[lost]} than {best.rocm.build}" if lost == 3 else f"usable, but {words[lost]}"


# --- impossible requests ----------------------------------------------------------------------


def _refusals(refused: list[RocmRefused], request: Request) -> str:
    """What ruled every alternative out, by the option that did (--os, --gpu, --rocm, --python)."""
    by_constraint: dict[str, list[str]] = {}
    for r in refused:
        why = (
            (f"{r.choice} is {r.why}" if r.why.startswith("built") else f"{r.choice}: {r.why}")
            if r.constraint == "rocm"
            else r.why
        )
        by_constraint.setdefault(r.constraint, []).append(why)
    if len(by_constraint) > 1:  # releases without the ROCm build asked for are not news beside the rest
        by_constraint.pop("rocm", None)
    given = request.given()
    parts = []
    for constraint, whys in by_constraint.items():
        unique = list(dict.fromkeys(whys))
        more = f" (and {len(unique) - 3} more)" if len(unique) > 3 else ""
        flag = f"--{constraint} {given[constraint]}" if constraint in given else f"--{constraint}"
        parts.append(f"{flag}: {'; '.join(unique[:3])}{more}")
    return "; ".join(parts) or "the knowledge base knows no ROCm build of that torch"


def _for_a_host(kb: KnowledgeBase, request: Request, os_info: OsInfo) -> str:
    """When only images were missing: what a host gets (provision installs wheels, no image needed)."""
    if request.purpose != "image":
        return ""
    try:
        stack = resolve_rocm(kb, replace(request, purpose="host"), os_info)
    except BadRequest:
        return ""
    return f"a host needs no image: provision (and resolve --for host) gets torch {stack.torch}+{stack.cuda_build}"


def _nearest(kb: KnowledgeBase, request: Request, amd: AmdGpu | None) -> str:
    """Which ROCm builds fit the GPU, or exist for the ROCm release asked for."""
    releases = [t for t in kb.torch_rocm if not request.torch or torch_matches(t.torch, request.torch)]
    tried = []
    if amd is not None:
        fits = [
            f"{t.torch}+{b}"
            for t in releases
            for b, code in t.arch.items()
            if amd.gfx in code and (amd.min_rocm is None or V(kb.rocm_by_build[b].version) >= V(amd.min_rocm))
        ]
        floor = f", ROCm ≥ {amd.min_rocm}" if amd.min_rocm else ""
        runs = f"runs torch {fits[0]} … {fits[-1]}" if fits else "runs no known torch build"
        tried.append(f"{amd.name} ({amd.gfx}{floor}) {runs}")
    for rocm in kb.rocm_matching(request.rocm) if request.rocm else ():
        made = [t.torch for t in kb.torch_rocm if rocm.build in t.arch]
        span = made[0] if len(made) == 1 else f"{made[0]}–{made[-1]}" if made else ""
        tried.append(f"{rocm.build} exists for torch {span}" if made else f"no torch has {rocm.build}")
    if request.os:
        tried.append("AMD's OS support per ROCm release: gpuenv matrix --rocm")
    return "; ".join(tried) or "relax a constraint; see gpuenv matrix --rocm"
