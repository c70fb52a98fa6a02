"""The collectives each rank runs, every element checked: allreduce, allgather and reducescatter of
one size, timed as nccl-tests times them, and across nodes the node's own ranks, one rank per node
and each node with the next.

Inputs are small integers in float32, so the reduced value is exact in any reduction order and
every element is compared.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from gpuenv.verify import nodes, ranks
from gpuenv.verify.workloads import common

MiB = 1 << 20
PAIR_BYTES = 8 * MiB


def timed_collective(
    coll: str,
    nbytes: int,
    rank: int,
    world: int,
    dev: Any,
    params: dict[str, Any],
    errors: list[dict[str, Any]],
    group: Any = None,
    tag: str = "",
) -> list[float]:
    import torch.distributed as dist  # torch: heavy, needed in the rank processes only

    ranks.mark()  # on a run across nodes, the board shows who got how far
    torch = common.torch_module()
    subtract: Callable[[Any], Any]
    numel = nbytes // 4 // world * world
    chunk = numel // world
    size = numel if coll != "allgather" else chunk
    base = (torch.arange(size, device=dev, dtype=torch.int32) % 61).to(torch.float32)
    # Buffers are allocated once and refilled, as nccl-tests does: fresh memory every iteration
    # would time page faults, not the collective.
    if coll == "allreduce":
        result = torch.empty_like(base)
    elif coll == "allgather":
        mine_in, gathered = torch.empty_like(base), torch.empty(world * size, device=dev)
    else:
        full, result = torch.empty_like(base), torch.empty(chunk, device=dev)
        mine = base[rank * chunk : (rank + 1) * chunk]
    times = []
    late = _lateness(params.get("slow"), group)
    for it in range(params["warmup"] + params["iters"]):
        # Each collective's result minus its exact expectation must be zero everywhere.
        if coll == "allreduce":
            torch.add(base, (rank + 1) * (it + 1), out=result)
            t0 = _start(dev, group, late)
            dist.all_reduce(result, group=group)
            common.sync(dev)
            elapsed = time.perf_counter() - t0
            offset = (it + 1) * world * (world + 1) // 2
            subtract = partial(_minus_times, part=base, times=world)
        elif coll == "allgather":
            torch.add(base, rank + it, out=mine_in)
            t0 = _start(dev, group, late)
            gather_into(gathered, mine_in, group=group)
            common.sync(dev)
            elapsed = time.perf_counter() - t0
            result = gathered.view(world, size).sub_(torch.arange(world, device=dev).view(-1, 1))
            offset = it
            subtract = partial(_minus_times, part=base, times=1)
        else:
            torch.add(base, rank + it, out=full)
            t0 = _start(dev, group, late)
            scatter_from(result, full, group=group)
            common.sync(dev)
            elapsed = time.perf_counter() - t0
            offset = world * it + world * (world - 1) // 2
            subtract = partial(_minus_times, part=mine, times=world)
        if params.get("fault") == "corrupt" and it == 0:
            result.view(-1)[result.numel() // 3] += 1
        _compare(subtract(result), offset, errors, coll=coll + tag, nbytes=nbytes, it=it)
        if it >= params["warmup"]:
            times.append(elapsed)
    return times


def _start(dev: Any, group: Any, late: float) -> float:
    """Every member at the start line (a barrier, the device idle), then the clock starts; a rank
    behind a slow node or link (the test seam's) enters `late` seconds after it."""
    import torch.distributed as dist  # torch: heavy, needed in the rank processes only

    dist.barrier(group=group)
    common.sync(dev)
    t0 = time.perf_counter()
    if late:
        time.sleep(late)
    return t0


def _lateness(slow: dict[str, Any] | None, group: Any) -> float:
    """The seconds GPUENV_TEST_FAULT's slow or slowlink adds to this rank's collectives in `group`."""
    import torch.distributed as dist  # torch: heavy, needed in the rank processes only

    if not slow:
        return 0.0
    if slow["peer"] is None:
        return float(slow["seconds"])
    members = dist.get_process_group_ranks(group) if group is not None else range(dist.get_world_size())
    return float(slow["seconds"]) if slow["peer"] in members else 0.0


def gather_into(output: Any, mine: Any, *, group: Any) -> None:
    """All-gather into one flat tensor (no list, no copy through a flat buffer in the timed region);
    torch 2.13 names it all_gather_single, older releases all_gather_into_tensor."""
    import torch.distributed as dist  # torch: heavy, needed in the rank processes only

    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(output, mine, group=group)


def scatter_from(output: Any, full: Any, *, group: Any) -> None:
    """Reduce-scatter from one flat tensor (reduce_scatter_single, or reduce_scatter_tensor)."""
    import torch.distributed as dist  # torch: heavy, needed in the rank processes only

    (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(output, full, group=group)


def _minus_times(r: Any, *, part: Any, times: int) -> Any:
    return r.sub_(part, alpha=times)


def _compare(residual: Any, want: int, errors: list[dict[str, Any]], *, coll: str, nbytes: int, it: int) -> None:
    """`residual` is the result minus the per-element part of the exact answer: all `want`."""
    residual = residual.reshape(-1)
    bad = residual != want
    nbad = int(torch_count(bad))
    if nbad:
        first = int(bad.nonzero()[0][0].item())
        errors.append(
            {
                "collective": coll,
                "bytes": nbytes,
                "iteration": it,
                "wrong": nbad,
                "elements": residual.numel(),
                "index": first,
                "off_by": float(residual.view(-1)[first].item()) - want,
            }
        )


def faulty(params: dict[str, Any]) -> dict[str, Any]:
    """The test seam's faults of this rank, for a collective run with its own iterations."""
    return {"fault": params.get("fault"), "slow": params.get("slow")}


def torch_count(mask: Any) -> int:
    import torch  # torch: heavy, needed in the rank processes only

    return int(torch.count_nonzero(mask).item())


def node_collectives(rank: int, dev: Any, params: dict[str, Any], errors: list[dict[str, Any]]) -> dict[str, Any]:
    """Across nodes: this node's ranks among themselves (intra), one rank per node (inter), and each
    node with the next (node pairs, from three nodes on). Every rank creates every group, in order."""
    import torch.distributed as dist  # torch: heavy, needed in the rank processes only

    placed = nodes.layout(params["rank_nodes"])
    nbytes = params["sizes"][-1]
    small = {**faulty(params), "warmup": params["warmup"], "iters": params["iters"]}
    intra_groups = [dist.new_group(members) for _node, members in placed]
    leaders = [members[0] for _node, members in placed]
    inter_group = dist.new_group(leaders) if len(placed) >= 2 else None
    ring = [(i, (i + 1) % len(placed)) for i in range(len(placed))] if len(placed) >= 3 else []
    pair_groups = [dist.new_group(sorted({leaders[a], leaders[b]})) for a, b in ring]
    mine = next(i for i, (_n, members) in enumerate(placed) if rank in members)
    node, members = placed[mine]
    out: dict[str, Any] = {"intra": None, "inter": None, "pairs": []}
    if len(members) >= 2:
        times = timed_collective(
            "allreduce",
            nbytes,
            members.index(rank),
            len(members),
            dev,
            small,
            errors,
            group=intra_groups[mine],
            tag=f" within node {node}",
        )
        out["intra"] = {"bytes": nbytes, "time": sum(times) / len(times)}
    if inter_group is not None and rank in leaders:
        times = timed_collective(
            "allreduce",
            nbytes,
            leaders.index(rank),
            len(leaders),
            dev,
            small,
            errors,
            group=inter_group,
            tag=" across nodes",
        )
        out["inter"] = {"bytes": nbytes, "time": sum(times) / len(times)}
    for (a, b), group in zip(ring, pair_groups, strict=True):
        if rank not in (leaders[a], leaders[b]):
            continue
        pair_errors: list[dict[str, Any]] = []
        names = (placed[a][0], placed[b][0])
        times = timed_collective(
            "allreduce",
            PAIR_BYTES,
            sorted((leaders[a], leaders[b])).index(rank),
            2,
            dev,
            small,
            pair_errors,
            group=group,
            tag=f" nodes {names[0]}-{names[1]}",
        )
        errors += pair_errors
        wrong = sum(e["wrong"] for e in pair_errors)
        out["pairs"].append({"pair": list(names), "wrong": wrong, "time": sum(times) / len(times)})
    return out
