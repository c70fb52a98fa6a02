"""Pairwise bisection (standard and deep, three ranks or more): every neighbouring pair of ranks
runs its own allreduce, so a wrong result names the GPU or the link at fault."""

from __future__ import annotations

from typing import Any

from gpuenv.verify.checks.allreduce.collectives import PAIR_BYTES, timed_collective


def pair_allreduces(rank: int, world: int, dev: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every neighbouring pair of ranks runs its own allreduce, to name the GPU or link at fault."""
    import torch.distributed as dist  # torch: heavy, needed in the rank processes only

    pairs = [(i, (i + 1) % world) for i in range(world)]
    groups = [dist.new_group(list(p)) for p in pairs]
    found = []
    for pair, group in zip(pairs, groups, strict=True):
        if rank not in pair:
            continue
        errors: list[dict[str, Any]] = []
        small = {"warmup": 1, "iters": 3, "fault": params.get("fault")}
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
        found.append({"pair": list(pair), "wrong": sum(e["wrong"] for e in errors), "time": sum(times) / len(times)})
    return found
