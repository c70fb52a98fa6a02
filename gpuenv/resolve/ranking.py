"""How usable candidates rank, and why one that was not chosen lost. Pure.

Every platform ranks the same way at the top — releases fit for a default first (when no --torch was
given), then the newest torch — and then by its own preferences (a confirmed build, a build the driver
runs natively, the newest CUDA or ROCm); `Resolution.rank` is the whole key, `rank_words` says each
position in words.
"""

from __future__ import annotations

from gpuenv.kb import TorchRelease
from gpuenv.resolve.candidates import Candidate, Resolution


def fit_for_default(torch: TorchRelease, build: str) -> bool:
    """What the default (no --torch) may pick: a confirmed build of a release whose torchvision is out."""
    return torch.build_confirmed(build) and torch.torchvision is not None


def best(survivors: list[Candidate], resolution: Resolution) -> Candidate:
    return max(survivors, key=resolution.rank)


def ranked_below(c: Candidate, chosen: Candidate, resolution: Resolution) -> str:
    """Why a usable candidate was not the choice: the first thing the ranking preferred in the choice."""
    mine, theirs = resolution.rank(c), resolution.rank(chosen)
    words = resolution.rank_words
    lost = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b), len(words) - 1)
    return "usable, but " + words[lost].format(best=chosen.build)
