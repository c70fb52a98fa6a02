"""Why CUDA's resolver chose what it chose: the reason for each pinned value, and the warnings that come
with the choice (unconfirmed facts, minor-version compatibility, end-of-life images). Pure."""

from __future__ import annotations

from gpuenv.kb import Architecture, ForwardCompat, KnowledgeBase, OsInfo, V, driver_runs_cuda, gpu_code_for
from gpuenv.resolve.candidates import Candidate
from gpuenv.resolve.ranking import fit_for_default
from gpuenv.resolve.request import Request, torch_matches


def reasons(
    kb: KnowledgeBase,
    best: Candidate,
    request: Request,
    os_info: OsInfo,
    arch: Architecture | None,
    survivors: list[Candidate],
) -> dict[str, str]:
    torch, python = best.torch, best.python
    cuda = kb.cuda_by_build[best.build]
    given = request.given()
    constraints = ", ".join(f"{k} {v}" for k, v in given.items()) or "no constraints"
    builds = sorted({c.build for c in survivors if c.torch is torch})
    settled = request.torch is None and fit_for_default(torch, cuda.build)
    newest = "newest settled release" if settled else "newest release"
    reasons = {
        "torch": f"{newest} that satisfies {constraints}",
        "build": (
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
        reasons["driver_branch"] = (
            f"the branch of driver {request.driver}, which the stack was resolved for "
            "(provision --driver-branch installs another)"
        )
    if arch is not None:
        sm = arch.sm.replace(".", "")
        code = torch.arch[cuda.build]
        how = "its own SASS" if gpu_code_for(code, arch.sm) == "sass" else "PTX the driver JIT-compiles"
        reasons["gpu"] = f"{arch.family} sm_{sm} runs torch {torch.version}+{cuda.build} ({code.span()}) through {how}"
    return reasons


def warnings(
    kb: KnowledgeBase,
    best: Candidate,
    request: Request,
    os_info: OsInfo,
    arch: Architecture | None,
    forward: ForwardCompat | None = None,
) -> list[str]:
    torch, python = best.torch, best.python
    cuda = kb.cuda_by_build[best.build]
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
    if request.cuda and request.cuda.count(".") == 2 and request.cuda != cuda.toolkit:
        out.append(
            f"CUDA {request.cuda} asked: the stack uses {cuda.toolkit}, the newest {cuda.version} patch "
            f"(the {cuda.build} wheels run on any {cuda.version}.x; its images are {cuda.toolkit})"
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
    if arch is not None and gpu_code_for(torch.arch[cuda.build], arch.sm) == "ptx":
        out.append(
            f"{arch.family} sm_{arch.sm.replace('.', '')} runs torch {torch.version}+{cuda.build} only through PTX "
            "JIT: the driver compiles every kernel at first use (minutes; cached after), and none is tuned for it"
        )
    if request.driver:
        compat = driver_runs_cuda(kb, request.driver, cuda.build)
        if compat.mode == "minor-version":
            lifted = f" ({forward.message}, lifting that limit)" if forward and forward.mode == "compat" else ""
            out.append(f"minor-version compatibility in use: {compat.message}{lifted}")
    if "image" in os_info.roles and (cuda.eol or cuda.toolkit in cuda.deleted_tags):
        state = "deleted from the registries" if cuda.toolkit in cuda.deleted_tags else "end-of-life"
        out.append(
            f"nvidia/cuda {cuda.toolkit} images are {state}: NVIDIA deletes end-of-life tags six months later; "
            "pin the base image by digest or mirror it"
        )
    if os_info.python[python].via == "deadsnakes":
        out.append(f"Python {python} on {os_info.name} comes from the deadsnakes PPA, a third-party repository")
    return out


def gpu_hint(kb: KnowledgeBase, request: Request, arch: Architecture) -> str:
    """Which builds carry code for the GPU, within the requested torch (or all releases)."""
    name = f"{request.gpu} (sm_{arch.sm.replace('.', '')})"
    releases = [t for t in kb.torch if not request.torch or torch_matches(t.version, request.torch)]
    fits = [f"{t.version}+{b}" for t in releases for b in t.builds if gpu_code_for(t.arch[b], arch.sm)]
    if not fits:
        return f"no torch {request.torch or 'release'} carries code for {name}"
    if request.torch:
        return f"for {name}, torch {request.torch} is built as {', '.join(fits)}"
    return f"{name} runs torch {fits[0]} … {fits[-1]}"
