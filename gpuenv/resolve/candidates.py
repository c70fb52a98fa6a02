"""The candidates of a resolution: every (torch release, build, Python) the knowledge base allows on the
OS, each build filtered by the constraints with the reason it was ruled out. Pure.

The loop is every platform's; what a platform decides — which builds a release has for the request, why
a build is ruled out, how usable builds rank, the Stack of the best — it answers through `Resolution`,
the resolve half of its gpuenv.platforms package, bound to one request.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from gpuenv.kb import ForwardCompat, KnowledgeBase, OsInfo, TorchRelease
from gpuenv.resolve.request import Request, pick_python, python_problem, torch_matches
from gpuenv.stack import Rejected, Stack


class Candidate(NamedTuple):
    torch: TorchRelease
    build: str  # torch's wheel build: "cu124", "rocm6.4", "cpu"
    python: str


class Refused(NamedTuple):
    """An alternative a constraint ruled out: the option that did ("image" is --os's images), and why."""

    torch: TorchRelease
    build: str  # "": the release itself, which has no build the request allows
    constraint: str
    why: str

    @property
    def choice(self) -> str:
        return f"torch {self.torch.version}" + (f"+{self.build}" if self.build else "")


class Resolution(Protocol):
    """One request's resolution on one platform (its inputs checked when it was made)."""

    @property
    def option(self) -> str:
        """The request's field that asks for the platform's builds ("cuda", "rocm"; "platform")."""

    @property
    def rank_words(self) -> tuple[str, ...]:
        """What each position of `rank` prefers, said of a candidate that lost on it ({best}: its build)."""

    def builds(self, torch: TorchRelease) -> tuple[tuple[str, ...], str]:
        """The release's builds the request allows, and why there are none when there are none."""

    def why_not(self, torch: TorchRelease, build: str) -> tuple[str, str] | None:
        """The constraint that rules the build out and why, or None when it can be used."""

    def forward_compat(self, build: str) -> ForwardCompat | None:
        """Whether a compatibility package (NVIDIA's cuda-compat) runs the build on the request's driver; None: the
        platform has none, or the request gives no driver."""

    def rank(self, c: Candidate) -> tuple[Any, ...]:
        """How good a usable candidate is: the highest is the choice."""

    def stack(self, best: Candidate, survivors: list[Candidate], rejected: tuple[Rejected, ...]) -> Stack:
        """The pinned Stack of the best candidate, with its reasons and warnings."""

    def refusal_line(self, constraint: str, refused: list[Refused], flag: str) -> str | None:
        """The platform's own words for what one constraint ruled out, or None for the usual line."""

    def hints(self) -> list[str]:
        """What fits nearby when nothing does, in the platform's terms."""


def candidates(
    kb: KnowledgeBase, request: Request, os_info: OsInfo, resolution: Resolution
) -> tuple[list[Candidate], list[Refused]]:
    """The usable candidates, and every alternative ruled out with the constraint that did."""
    survivors: list[Candidate] = []
    refused: list[Refused] = []
    for torch in kb.torch:
        if request.torch and not torch_matches(torch.version, request.torch):
            continue
        builds, none_why = resolution.builds(torch)
        if not builds:
            refused.append(Refused(torch, "", resolution.option, none_why))
        for build in builds:
            failed = resolution.why_not(torch, build)
            if failed:
                refused.append(Refused(torch, build, *failed))
                continue
            python = pick_python(torch, os_info, request.python)
            if python is None:
                refused.append(Refused(torch, build, "python", python_problem(torch, os_info, request.python)))
                continue
            survivors.append(Candidate(torch, build, python))
    return survivors, refused
