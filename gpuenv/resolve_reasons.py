"""Why the resolver chose what it chose: the reason for each pinned value, and the warnings that come
with the choice (unconfirmed facts, minor-version compatibility, end-of-life images). Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from packaging.version import Version

from gpuenv.compat import Architecture, KnowledgeBase, OsInfo, TorchRelease, V, driver_runs_cuda, gpu_code_for

if TYPE_CHECKING:
    from gpuenv.resolve import Candidate, Refused, Request


def fit_for_default(torch: TorchRelease, build: str) -> bool:
    """What the default (no --torch) may pick: a confirmed build of a release whose torchvision is out."""
    return torch.build_confirmed(build) and torch.torchvision is not None


def rank(kb: KnowledgeBase, c: Candidate, request: Request) -> tuple[bool, Version, bool, bool, bool, Version]:
    """How good a usable candidate is: the survivor ranking highest is the choice."""
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


# what each position of rank() prefers, said of a candidate that lost on it
RANK_WORDS = (
    "not settled (unconfirmed builds or no torchvision yet): give --torch to use it",
    "an older release",
    "its build is unconfirmed",
    "the driver runs it only through minor-version compatibility",
    "{best} is the build of torch's plain PyPI wheel",
    "an older CUDA than {best}",
)


def ranked_below(kb: KnowledgeBase, c: Candidate, best: Candidate, request: Request) -> str:
    """Why a usable candidate was not the choice: the first thing the ranking preferred in the choice."""
    mine, theirs = rank(kb, c, request), rank(kb, best, request)
    lost = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b), len(RANK_WORDS) - 1)
    return "usable, but " + RANK_WORDS[lost].format(best=best.cuda.build)


def refusals(refused: list[Refused], request: Request, os_name: str) -> str:
    """What ruled every alternative out, by the option that did (--os's images, --driver, --gpu, …)."""
    by_constraint: dict[str, list[Refused]] = {}
    for r in refused:
        by_constraint.setdefault(r.constraint, []).append(r)
    if len(by_constraint) > 1:  # releases without the --cuda build asked for are not news beside the rest
        by_constraint.pop("cuda", None)
    given = request.given()
    parts = []
    for constraint, items in by_constraint.items():
        if constraint == "image":
            toolkits = ", ".join(dict.fromkeys(r.toolkit for r in items))
            parts.append(f"--os {os_name}: nvidia/cuda has no {os_name} image for CUDA {toolkits}")
            continue
        whys = list(dict.fromkeys(r.why for r in items))
        more = f" (and {len(whys) - 3} more)" if len(whys) > 3 else ""
        flag = f"--{constraint} {given[constraint]}" if constraint in given else f"--{constraint}"
        parts.append(f"{flag}: {'; '.join(whys[:3])}{more}")
    return "; ".join(parts) or "nothing is known that matches"


def reasons(
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


def warnings(
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
