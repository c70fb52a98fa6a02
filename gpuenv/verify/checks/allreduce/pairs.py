"""Pairwise runs (three ranks or more): ring neighbours at quick, every pair at standard and deep.
Each pair runs its own allreduce, so a wrong result names the GPU or link at fault, and each
pair's time (the median of its iterations) is compared with the node's other pairs (judging.py)."""

from __future__ import annotations

import itertools
import statistics
from typing import Any

from gpuenv.verify.checks.allreduce.collectives import PAIR_BYTES, faulty, timed_collective

PAIR_ITERS = 5


def pairs_of(world: int, how: str) -> list[tuple[int, int]]:
    """ "ring": each rank with the next; "all": every pair once."""
    if how == "all":
        return list(itertools.combinations(range(world), 2))
    return [(i, (i + 1) % world) for i in range(world)]


def pair_allreduces(rank: int, world: int, dev: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    """This rank's pairs, one after the other (every rank creates every group, in order)."""
    import torch.distributed as dist  # torch: heavy, needed in the rank processes only

    pairs = pairs_of(world, params.get("pairs", "ring"))
    groups = [dist.new_group(list(p)) for p in pairs]
    found = []
    for pair, group in zip(pairs, groups, strict=True):
        if rank not in pair:
            continue
        errors: list[dict[str, Any]] = []
        small = {**faulty(params), "warmup": 1, "iters": PAIR_ITERS}
        times = timed_collective(
            "allreduce",
            PAIR_BYTES,
            pair.index(rank),
            2,
            dev,
            small,
            errors,
            group=group,
            tag=f" pair {pair[0]}-{pair[1]}",
        )
        found.append({"pair": list(pair), "wrong": sum(e["wrong"] for e in errors), "time": statistics.median(times)})
    return found
