"""The resolver: from any subset of constraints to one fully pinned Stack, with its reasons.

Pure: takes a KnowledgeBase and a Request, returns a Stack or raises BadRequest naming the
nearest valid choices. Candidates are every (torch release, CUDA build, Python) the knowledge
base allows on the OS; each constraint filters them with a reason, and the survivors are ranked:
with no --torch, releases fit for a default first (builds confirmed, a torchvision released);
then newest torch, a build the driver runs natively, torch's default build, the newest build.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import NamedTuple

from packaging.version import Version

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
from gpuenv.stack import Rejected, Stack

DEFAULT_OS = "ubuntu22.04"
MIN_PYTHON = "3.10"
# Preferred ways to get Python, most preferred first: the OS's own package needs no extra repository.
PYTHON_SOURCE_RANK = {"system": 0, "distro": 1, "appstream": 1, "deadsnakes": 2}


@dataclass(frozen=True)
class Request:
    torch: str | None = None  # "2.4", "2.4.0" or "2.4.0+cu121" (the local version picks the build)
    cuda: str | None = None
    driver: str | None = None
    python: str | None = None
    gpu: str | None = None  # a model name ("H100") or "sm_90"
    os: str | None = None

    def given(self) -> dict[str, str]:
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}


class Candidate(NamedTuple):
    torch: TorchRelease
    cuda: CudaRelease
    python: str


def resolve(kb: KnowledgeBase, request: Request) -> Stack:
    request = _split_local_version(kb, request)
    os_info = _os(kb, request.os or DEFAULT_OS)
    arch = _arch(kb, request.gpu) if request.gpu else None
    if request.cuda and kb.find_cuda(request.cuda) is None:
        raise BadRequest(
            f"unknown CUDA version {request.cuda}",
            hint=f"known: {', '.join(c.version for c in kb.cuda)}",
        )
    if request.torch and not any(torch_matches(t.version, request.torch) for t in kb.torch):
        raise BadRequest(
            f"unknown torch version {request.torch}",
            hint=f"known: {_release_lines(kb)}",
        )
    survivors, rejected = _candidates(kb, request, os_info, arch)
    if not survivors:
        raise BadRequest(_no_stack_message(request), hint=_nearest(kb, request))
    best = max(survivors, key=lambda c: _rank(kb, c, request))
    return _stack(kb, best, request, os_info, arch, survivors, rejected)


# --- inputs ------------------------------------------------------------------------------------


def _split_local_version(kb: KnowledgeBase, request: Request) -> Request:
    """--torch 2.4.0+cu121 is --torch 2.4.0 --cuda cu121 (refused if --cuda says otherwise)."""
    if not request.torch or "+" not in request.torch:
        return request
    version, build = request.torch.split("+", 1)
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


def torch_matches(version: str, wanted: str) -> bool:
    """'2.4' matches any 2.4.x; '2.0.1' matches exactly; '2.4.0+cu121' matches 2.4.0."""
    wanted = wanted.split("+", 1)[0]
    return version == wanted or version.startswith(wanted + ".")


def _cuda_matches(row: CudaRelease, wanted: str) -> bool:
    return wanted in (row.version, row.toolkit, row.build)


# --- candidates and their filters ---------------------------------------------------------------


def _candidates(
    kb: KnowledgeBase, request: Request, os_info: OsInfo, arch: Architecture | None
) -> tuple[list[Candidate], list[tuple[TorchRelease, Rejected]]]:
    survivors: list[Candidate] = []
    rejected: list[tuple[TorchRelease, Rejected]] = []
    for torch in kb.torch:
        if request.torch and not torch_matches(torch.version, request.torch):
            continue
        for build in torch.builds:
            cuda = kb.cuda_by_build[build]
            name = f"torch {torch.version}+{build}"
            if request.cuda and not _cuda_matches(cuda, request.cuda):
                continue
            why = _why_not(kb, torch, cuda, request, os_info, arch)
            if why:
                rejected.append((torch, Rejected(name, why)))
                continue
            python = _pick_python(torch, os_info, request.python)
            if python is None:
                rejected.append((torch, Rejected(name, _python_problem(torch, os_info, request.python))))
                continue
            survivors.append(Candidate(torch, cuda, python))
    return survivors, rejected


def _why_not(
    kb: KnowledgeBase,
    torch: TorchRelease,
    cuda: CudaRelease,
    request: Request,
    os_info: OsInfo,
    arch: Architecture | None,
) -> str | None:
    """Why this torch build cannot be used, or None when it can."""
    if "image" in os_info.roles and os_info.name not in cuda.images:
        return f"no nvidia/cuda {cuda.toolkit} image for {os_info.name}"
    if request.driver:
        compat = driver_runs_cuda(kb, request.driver, cuda.build)
        if not compat.ok:
            return compat.message
    if arch is not None and gpu_code_for(torch.arch[cuda.build], arch.sm) is None:
        code = torch.arch[cuda.build]
        return f"its GPU code is {code.span()}: no kernel for {arch.family} sm_{arch.sm.replace('.', '')}"
    return None


def _pick_python(torch: TorchRelease, os_info: OsInfo, wanted: str | None) -> str | None:
    usable = [
        v for v in torch.python if v in os_info.python and V(v) >= V(MIN_PYTHON) and v not in torch.python_experimental
    ]
    if wanted is not None:
        return wanted if wanted in usable else None
    if not usable:
        return None
    # The OS's own package first; among equals the lowest version, the one every release supports.
    return min(usable, key=lambda v: (PYTHON_SOURCE_RANK.get(os_info.python[v].via, 9), V(v)))


def _python_problem(torch: TorchRelease, os_info: OsInfo, wanted: str | None) -> str:
    span = f"{torch.python[0]}–{torch.python[-1]}"
    if wanted in torch.python_experimental:
        return f"torch {torch.version}'s Python {wanted} wheels are experimental, without torchvision"
    if wanted is None:
        return f"no Python ≥ {MIN_PYTHON} that torch {torch.version} supports ({span}) is available on {os_info.name}"
    if wanted not in torch.python:
        return f"torch {torch.version} supports Python {span}, not {wanted}"
    if V(wanted) < V(MIN_PYTHON):
        return f"gpuenv stacks use Python ≥ {MIN_PYTHON}"
    return f"{os_info.name} has no known way to provide Python {wanted} (has {', '.join(os_info.python)})"


def _rank(kb: KnowledgeBase, c: Candidate, request: Request) -> tuple[bool, Version, bool, bool, bool, Version]:
    native = request.driver is None or driver_runs_cuda(kb, request.driver, c.cuda.build).mode == "native"
    default_fit = request.torch is not None or fit_for_default(c.torch, c.cuda.build)
    confirmed = c.torch.build_confirmed(c.cuda.build)
    return (
        default_fit,
        V(c.torch.version),
        confirmed,
        native,
        c.cuda.build == c.torch.default_build,
        V(c.cuda.version),
    )


def fit_for_default(torch: TorchRelease, build: str) -> bool:
    """What the default (no --torch) may pick: a confirmed build of a release whose torchvision is out."""
    return torch.build_confirmed(build) and torch.torchvision is not None


# --- the result -------------------------------------------------------------------------------


def _stack(
    kb: KnowledgeBase,
    best: Candidate,
    request: Request,
    os_info: OsInfo,
    arch: Architecture | None,
    survivors: list[Candidate],
    rejected: list[tuple[TorchRelease, Rejected]],
) -> Stack:
    torch, cuda, python = best
    branch = recommended_branch(kb, cuda)
    warnings = _warnings(kb, best, request, os_info, arch)
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
        numpy="numpy<2" if V(torch.version) < V("2.3") else "numpy<3",
        driver_min=cuda.bundled_driver,
        driver_floor=cuda.minor_compat_floor,
        driver_branch=branch.branch,
        gpu_sm=arch.sm if arch else None,
        arch_list=_arch_list(kb, torch, cuda, arch),
        base_image_eol=bool(images) and (cuda.eol or cuda.toolkit in cuda.deleted_tags),
        reasons=_reasons(kb, best, request, os_info, arch, survivors),
        rejected=tuple(_nearby(rejected, best)),
        warnings=tuple(warnings),
    )


def _base_images(cuda: CudaRelease, os_info: OsInfo) -> dict[str, str]:
    if "image" not in os_info.roles:
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


def _reasons(
    kb: KnowledgeBase,
    best: Candidate,
    request: Request,
    os_info: OsInfo,
    arch: Architecture | None,
    survivors: list[Candidate],
) -> dict[str, str]:
    torch, cuda, python = best
    given = request.given()
    constraints = ", ".join(f"{k} {v}" for k, v in given.items()) or "no constraints"
    builds = sorted({c.cuda.build for c in survivors if c.torch is torch})
    settled = request.torch is None and fit_for_default(torch, cuda.build)
    newest = "newest settled release" if settled else "newest release"
    reasons = {
        "torch": f"{newest} that satisfies {constraints}",
        "cuda_build": (
            f"{cuda.build} among this release's usable builds ({', '.join(builds)})"
            + ("; it is the build of torch's plain PyPI wheel" if cuda.build == torch.default_build else "")
        ),
        "cuda": f"newest patch of CUDA {cuda.version} with images ({cuda.toolkit})",
        "cudnn": (
            f"the cuDNN inside nvidia/cuda {cuda.toolkit} cudnn images; the torch wheel bundles its own"
            if cuda.cudnn
            else "not known for this toolkit"
        ),
        "python": f"Python {python} via {os_info.python[python].via}: {os_info.python[python].note}",
        "os": f"{os_info.name}" + (" (default)" if request.os is None else " (requested)"),
        "driver_min": f"the driver bundled with CUDA {cuda.toolkit}; runs the stack with no caveat",
        "driver_floor": f"minor-version compatibility lets drivers ≥ {cuda.minor_compat_floor} run it, without PTX JIT",
        "driver_branch": "newest long-term-support branch that runs this CUDA natively, else the lowest production one",
    }
    if request.driver:
        reasons["driver"] = driver_runs_cuda(kb, request.driver, cuda.build).message
    if arch is not None:
        sm = arch.sm.replace(".", "")
        code = torch.arch[cuda.build]
        how = "its own SASS" if gpu_code_for(code, arch.sm) == "sass" else "PTX the driver JIT-compiles"
        reasons["gpu"] = f"{arch.family} sm_{sm} runs torch {torch.version}+{cuda.build} ({code.span()}) through {how}"
    return reasons


def _nearby(rejected: list[tuple[TorchRelease, Rejected]], best: Candidate) -> list[Rejected]:
    """The rejected alternatives worth showing: the chosen release's other builds and newer releases."""
    chosen = V(best.torch.version)
    return [r for torch, r in rejected if V(torch.version) >= chosen][:12]


def _warnings(
    kb: KnowledgeBase, best: Candidate, request: Request, os_info: OsInfo, arch: Architecture | None
) -> list[str]:
    torch, cuda, python = best
    out: list[str] = []
    for item in torch.provenance.unconfirmed:
        relevant = item in (f"build:{cuda.build}", f"arch:{cuda.build}", f"python:{python}") or ":" not in item
        if relevant:
            out.append(f"unconfirmed fact: torch {torch.version} {item.replace(':', ' ')} ({torch.provenance.source})")
    if torch.torchvision is None:
        out.append(f"torchvision has no release for torch {torch.version} yet: the stack pins torch without it")
    if request.torch is None and not fit_for_default(torch, cuda.build):
        out.append(
            f"torch {torch.version} is not settled (unconfirmed builds or no torchvision), but nothing else fits"
        )
    for item in cuda.provenance.unconfirmed:
        relevant = item in ("cudnn", "toolkit", "eol") or (
            item == f"images:{os_info.name}" and "image" in os_info.roles
        )
        if relevant:
            out.append(f"unconfirmed fact: CUDA {cuda.version} {item.replace(':', ' ')} ({cuda.provenance.source})")
    if arch is not None and arch.provenance.unconfirmed and arch.min_cuda and V(cuda.version) < V(arch.min_cuda):
        # what is unconfirmed about an architecture is how builds older than its first nvcc run on it
        out.append(f"unconfirmed fact: {arch.family} sm {arch.sm} {', '.join(arch.provenance.unconfirmed)}")
    if request.driver:
        compat = driver_runs_cuda(kb, request.driver, cuda.build)
        if compat.mode == "minor-version":
            out.append(f"minor-version compatibility in use: {compat.message}")
    if "image" in os_info.roles and (cuda.eol or cuda.toolkit in cuda.deleted_tags):
        state = "deleted from the registries" if cuda.toolkit in cuda.deleted_tags else "end-of-life"
        out.append(
            f"nvidia/cuda {cuda.toolkit} images are {state}: NVIDIA deletes end-of-life tags six months later; "
            "pin the base image by digest or mirror it"
        )
    if os_info.python[python].via == "deadsnakes":
        out.append(f"Python {python} on {os_info.name} comes from the deadsnakes PPA, a third-party repository")
    return out


# --- impossible requests ----------------------------------------------------------------------


def _no_stack_message(request: Request) -> str:
    given = ", ".join(f"--{k} {v}" for k, v in request.given().items())
    return f"no stack satisfies {given}"


def _nearest(kb: KnowledgeBase, request: Request) -> str:
    """What each constraint allows with the others relaxed, like pip-tools' 'tried' list."""
    given = request.given()
    tried: list[str] = []
    for name in given:
        if name == "os" and len(given) > 1:
            continue
        relaxed = Request(**{k: v for k, v in given.items() if k != name})
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
    return "; ".join(tried) or "relax a constraint; see gpuenv matrix"


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
