"""The resolver: from any subset of constraints to one fully pinned Stack, with its reasons.

Pure: takes a KnowledgeBase and a Request, returns a Stack or raises BadRequest naming the
nearest valid choices. Candidates are every (torch release, CUDA build, Python) the knowledge
base allows on the OS; each constraint filters them with a reason, and the survivors are ranked:
with no --torch, releases fit for a default first (builds confirmed, a torchvision released);
then newest torch, a build the driver runs natively, torch's default build, the newest build.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple, get_args

from gpuenv import resolve_reasons as explain
from gpuenv.compat import (
    Architecture,
    CudaRelease,
    KnowledgeBase,
    OsInfo,
    TorchRelease,
    V,
    driver_runs_cuda,
    gpu_code_for,
    recommended_branch,
)
from gpuenv.errors import BadRequest
from gpuenv.resolve_request import (
    DEFAULT_OS,
    MIN_PYTHON,
    PYTHON_SOURCE_RANK,
    Purpose,
    Request,
    numpy_requirement,
    pick_python,
    python_problem,
    torch_matches,
)
from gpuenv.resolve_rocm import resolve_rocm, split_rocm_build, wants_rocm
from gpuenv.stack import Rejected, Stack

__all__ = [
    "DEFAULT_OS",
    "MIN_PYTHON",
    "PYTHON_SOURCE_RANK",
    "Candidate",
    "Purpose",
    "Refused",
    "Request",
    "resolve",
    "torch_matches",
]


class Candidate(NamedTuple):
    torch: TorchRelease
    cuda: CudaRelease
    python: str


class Refused(NamedTuple):
    """An alternative a constraint ruled out: the option that did ("image" is --os's images), and why."""

    torch: TorchRelease
    choice: str
    constraint: str
    why: str
    toolkit: str = ""  # for "image": the CUDA toolkit that has no image


def resolve(kb: KnowledgeBase, request: Request) -> Stack:
    if request.purpose not in get_args(Purpose):
        raise ValueError(f"a stack is for an image or a host, not {request.purpose!r}")
    request = _split_local_version(kb, request)
    os_info = _os(kb, request.os or DEFAULT_OS)
    if request.torch and not any(torch_matches(t.version, request.torch) for t in kb.torch):
        raise BadRequest(
            f"unknown torch version {request.torch}",
            hint=f"known: {_release_lines(kb)}",
        )
    if wants_rocm(kb, request):
        return resolve_rocm(kb, request, os_info)
    arch = _arch(kb, request.gpu) if request.gpu else None
    if request.cuda and kb.find_cuda(request.cuda) is None:
        raise BadRequest(
            f"unknown CUDA version {request.cuda}",
            hint=f"known: {', '.join(c.version for c in kb.cuda)}",
        )
    survivors, refused = _candidates(kb, request, os_info, arch)
    if not survivors:
        message = f"{_no_stack_message(request)}: {explain.refusals(refused, request, os_info.name)}"
        raise BadRequest(message, hint=_nearest(kb, request))
    best = max(survivors, key=lambda c: explain.rank(kb, c, request))
    return _stack(kb, best, request, os_info, arch, survivors, refused)


# --- inputs ------------------------------------------------------------------------------------


def _split_local_version(kb: KnowledgeBase, request: Request) -> Request:
    """--torch 2.4.0+cu121 is --torch 2.4.0 --cuda cu121 (refused if --cuda says otherwise); +rocm6.4 is --rocm 6.4."""
    if not request.torch or "+" not in request.torch:
        return request
    version, build = request.torch.split("+", 1)
    if build.startswith("rocm"):
        return split_rocm_build(kb, request, version, build)
    row = kb.find_cuda(build)
    if row is None:
        raise BadRequest(
            f"unknown CUDA build {build} in torch version {request.torch}",
            hint=f"known builds: {', '.join(c.build for c in kb.cuda)}",
        )
    if request.cuda and not _cuda_matches(row, request.cuda):
        raise BadRequest(
            f"--torch {request.torch} names build {build}, but --cuda asks for {request.cuda}",
            hint=f"drop --cuda, or ask for --torch {version}",
        )
    return replace(request, torch=version, cuda=row.build)


def _release_lines(kb: KnowledgeBase) -> str:
    """'1.13.0–1.13.1, 2.0.0–2.0.1, …': every known release, by release line."""
    lines: dict[str, list[str]] = {}
    for t in kb.torch:
        lines.setdefault(".".join(t.version.split(".")[:2]), []).append(t.version)
    return ", ".join(v[0] if len(v) == 1 else f"{v[0]}–{v[-1]}" for v in lines.values())


def _os(kb: KnowledgeBase, name: str) -> OsInfo:
    info = kb.os_by_name.get(name.lower())
    if info is None:
        raise BadRequest(f"unknown OS {name!r}", hint=f"known: {', '.join(kb.os_by_name)}")
    return info


def _arch(kb: KnowledgeBase, gpu: str) -> Architecture:
    if gpu.lower().startswith("sm_"):
        digits = gpu[3:]
        sm = f"{digits[:-1]}.{digits[-1]}"
        arch = kb.arch(sm)
        if arch is None:
            raise BadRequest(
                f"unknown compute capability {gpu}",
                hint=f"known: {', '.join('sm_' + a.sm.replace('.', '') for a in kb.architectures)}",
            )
        return arch
    found = kb.find_gpu(gpu)
    if found is None:
        raise BadRequest(f"unknown GPU {gpu!r}", hint=f"known: {', '.join(g.name for g in kb.gpus)}, or sm_NN")
    arch = kb.arch(found.sm)
    assert arch is not None  # guaranteed by the schema check
    return arch


def _cuda_matches(row: CudaRelease, wanted: str) -> bool:
    return row.names(wanted)


# --- candidates and their filters ---------------------------------------------------------------


def _candidates(
    kb: KnowledgeBase, request: Request, os_info: OsInfo, arch: Architecture | None
) -> tuple[list[Candidate], list[Refused]]:
    survivors: list[Candidate] = []
    refused: list[Refused] = []
    for torch in kb.torch:
        if request.torch and not torch_matches(torch.version, request.torch):
            continue
        builds = [b for b in torch.builds if not request.cuda or _cuda_matches(kb.cuda_by_build[b], request.cuda)]
        if not builds:
            why = f"built for {', '.join(torch.builds)}, not CUDA {request.cuda}"
            refused.append(Refused(torch, f"torch {torch.version}", "cuda", why))
        for build in builds:
            cuda = kb.cuda_by_build[build]
            name = f"torch {torch.version}+{build}"
            failed = _why_not(kb, torch, cuda, request, os_info, arch)
            if failed:
                refused.append(Refused(torch, name, *failed))
                continue
            python = pick_python(torch, os_info, request.python)
            if python is None:
                refused.append(Refused(torch, name, "python", python_problem(torch, os_info, request.python)))
                continue
            survivors.append(Candidate(torch, cuda, python))
    return survivors, refused


def _why_not(
    kb: KnowledgeBase,
    torch: TorchRelease,
    cuda: CudaRelease,
    request: Request,
    os_info: OsInfo,
    arch: Architecture | None,
) -> tuple[str, str] | tuple[str, str, str] | None:
    """The constraint that rules this torch build out and why, or None when it can be used."""
    if request.purpose == "image" and not _has_image(cuda, os_info):
        return "image", f"no nvidia/cuda {cuda.toolkit} image for {os_info.name}", cuda.toolkit
    if request.driver:
        compat = driver_runs_cuda(kb, request.driver, cuda.build)
        if not compat.ok:
            return "driver", compat.message
    if arch is not None and gpu_code_for(torch.arch[cuda.build], arch.sm) is None:
        code = torch.arch[cuda.build]
        return "gpu", f"its GPU code is {code.span()}: no kernel for {arch.family} sm_{arch.sm.replace('.', '')}"
    return None


def _has_image(cuda: CudaRelease, os_info: OsInfo) -> bool:
    """Whether an image can be based on nvidia/cuda for this CUDA and OS (a host-only OS has none to miss)."""
    return "image" not in os_info.roles or os_info.name in cuda.images


# --- the result -------------------------------------------------------------------------------


def _stack(
    kb: KnowledgeBase,
    best: Candidate,
    request: Request,
    os_info: OsInfo,
    arch: Architecture | None,
    survivors: list[Candidate],
    refused: list[Refused],
) -> Stack:
    torch, cuda, python = best
    branch = recommended_branch(kb, cuda)
    warnings = explain.warnings(kb, best, request, os_info, arch)
    images = _base_images(cuda, os_info)
    return Stack(
        torch=torch.version,
        torchvision=torch.torchvision,
        torchaudio=torch.torchaudio,
        cuda=cuda.toolkit,
        cuda_build=cuda.build,
        cudnn=cuda.cudnn,
        python=python,
        python_source=os_info.python[python],
        os=os_info.name,
        base_images=images,
        index_url=kb.index_url(cuda.build),
        numpy=numpy_requirement(torch.version),
        driver_min=cuda.bundled_driver,
        driver_floor=cuda.minor_compat_floor,
        driver_branch=branch.branch,
        gpu_sm=arch.sm if arch else None,
        arch_list=_arch_list(kb, torch, cuda, arch),
        base_image_eol=bool(images) and (cuda.eol or cuda.toolkit in cuda.deleted_tags),
        reasons=explain.reasons(kb, best, request, os_info, arch, survivors),
        rejected=tuple(_nearby(kb, refused, best, survivors, request)),
        warnings=tuple(warnings),
    )


def _base_images(cuda: CudaRelease, os_info: OsInfo) -> dict[str, str]:
    if "image" not in os_info.roles or os_info.name not in cuda.images:
        return {}
    repo, tk, osn, dnn = "nvidia/cuda", cuda.toolkit, os_info.name, cuda.cudnn_tag
    return {
        "base": f"{repo}:{tk}-base-{osn}",
        "runtime": f"{repo}:{tk}-runtime-{osn}",
        "devel": f"{repo}:{tk}-devel-{osn}",
        "cudnn-runtime": f"{repo}:{tk}-{dnn}-runtime-{osn}",
        "cudnn-devel": f"{repo}:{tk}-{dnn}-devel-{osn}",
    }


def _arch_list(kb: KnowledgeBase, torch: TorchRelease, cuda: CudaRelease, arch: Architecture | None) -> str:
    """TORCH_CUDA_ARCH_LIST for extensions: the GPU's own, else the release's, less what nvcc cannot target."""
    if arch is not None:
        return arch.sm
    code = torch.arch[cuda.build]
    keep = [sm for sm in code.sass if (a := kb.arch(sm)) is None or not a.min_cuda or V(cuda.version) >= V(a.min_cuda)]
    return ";".join(sm + ("+PTX" if sm in code.ptx else "") for sm in keep)


def _nearby(
    kb: KnowledgeBase, refused: list[Refused], best: Candidate, survivors: list[Candidate], request: Request
) -> list[Rejected]:
    """The alternatives worth showing, nearest first: the chosen release's other builds, then newer releases,
    each ruled out by a constraint or ranked below the choice."""
    chosen = V(best.torch.version)
    passed_over = [
        (c.torch, Rejected(f"torch {c.torch.version}+{c.cuda.build}", explain.ranked_below(kb, c, best, request)))
        for c in survivors
        if c != best and V(c.torch.version) >= chosen
    ]
    ruled_out = [(r.torch, Rejected(r.choice, r.why)) for r in refused if V(r.torch.version) >= chosen]
    nearby = sorted(passed_over + ruled_out, key=lambda pair: V(pair[0].version))
    return _runs_merged([rejected for _, rejected in nearby])[:8]


def _runs_merged(rejected: list[Rejected]) -> list[Rejected]:
    """Consecutive releases ruled out for the same reason as one range: torch 2.1.0–2.3.1."""
    merged: list[Rejected] = []
    for r in rejected:
        last = merged[-1] if merged else None
        if last is not None and last.why == r.why and "+" not in last.choice + r.choice:
            first = last.choice.split("–")[0]
            merged[-1] = Rejected(f"{first}–{r.choice.removeprefix('torch ')}", r.why)
        else:
            merged.append(r)
    return merged


# --- impossible requests ----------------------------------------------------------------------


def _no_stack_message(request: Request) -> str:
    given = ", ".join(f"--{k} {v}" for k, v in request.given().items())
    return f"no stack satisfies {given}"


def _nearest(kb: KnowledgeBase, request: Request) -> str:
    """What each constraint allows with the others relaxed, like pip-tools' 'tried' list."""
    given = request.given()
    tried: list[str] = [_for_a_host(kb, request)] if request.purpose == "image" else []
    for name in given:
        if name == "os" and len(given) > 1:
            continue
        relaxed = Request(**{k: v for k, v in given.items() if k != name}, purpose=request.purpose)
        kept = ", ".join(f"{k} {v}" for k, v in relaxed.given().items()) or "no constraints"
        try:
            stack = resolve(kb, relaxed)
        except BadRequest:
            continue
        tried.append(f"without --{name}: torch {stack.torch}+{stack.cuda_build} ({kept})")
    if request.torch and request.cuda:
        builds = sorted({b for t in kb.torch if torch_matches(t.version, request.torch) for b in t.builds})
        tried.append(f"torch {request.torch} is built for {', '.join(builds)}")
    if request.gpu:
        tried.append(_gpu_hint(kb, request))
    if request.cuda and (row := kb.find_cuda(request.cuda)):
        releases = [t.version for t in kb.torch if row.build in t.builds]
        if releases:
            tried.append(f"{row.build} exists for torch {releases[0]}–{releases[-1]}")
        else:
            tried.append(f"no torch release is built for CUDA {row.version}")
    return "; ".join(t for t in tried if t) or "relax a constraint; see gpuenv matrix"


def _for_a_host(kb: KnowledgeBase, request: Request) -> str:
    """When only images were missing: what a host gets (provision installs wheels, no image needed)."""
    try:
        stack = resolve(kb, replace(request, purpose="host"))
    except BadRequest:
        return ""
    return f"a host needs no image: provision (and resolve --for host) gets torch {stack.torch}+{stack.cuda_build}"


def _gpu_hint(kb: KnowledgeBase, request: Request) -> str:
    """Which builds carry code for the GPU, within the requested torch (or all releases)."""
    arch = _arch(kb, request.gpu or "")
    name = f"{request.gpu} (sm_{arch.sm.replace('.', '')})"
    releases = [t for t in kb.torch if not request.torch or torch_matches(t.version, request.torch)]
    fits = [f"{t.version}+{b}" for t in releases for b in t.builds if gpu_code_for(t.arch[b], arch.sm)]
    if not fits:
        return f"no torch {request.torch or 'release'} carries code for {name}"
    if request.torch:
        return f"for {name}, torch {request.torch} is built as {', '.join(fits)}"
    return f"{name} runs torch {fits[0]} … {fits[-1]}"
