"""allreduce (and allgather/reducescatter at standard): exact collectives and their bandwidth.

Inputs are small integers in float32, so the reduced value is exact in any reduction order and
every element is compared. algbw = bytes / time; busbw = algbw x the nccl-tests factor.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from gpuenv.verify import nodes
from gpuenv.verify.baselines import Baselines, load_baselines
from gpuenv.verify.catalogue import finding
from gpuenv.verify.checks import common
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, GpuRef, status_from_findings
from gpuenv.verify.spread import Spread

MiB = 1 << 20
PLANS: dict[tuple[str, str], dict[str, Any]] = {
    ("cpu", "quick"): {"sizes": [64 * MiB], "iters": 3, "warmup": 1, "collectives": ["allreduce"]},
    ("cpu", "standard"): {
        "sizes": [1 * MiB, 16 * MiB, 64 * MiB, 256 * MiB],
        "iters": 3,
        "warmup": 1,
        "collectives": ["allreduce", "allgather", "reducescatter"],
    },
    ("cpu", "deep"): {
        "sizes": [1 * MiB, 16 * MiB, 64 * MiB, 256 * MiB],
        "iters": 5,
        "warmup": 1,
        "collectives": ["allreduce", "allgather", "reducescatter"],
    },
    ("cuda", "quick"): {"sizes": [512 * MiB], "iters": 5, "warmup": 2, "collectives": ["allreduce"]},
    ("cuda", "standard"): {
        "sizes": [1 * MiB, 16 * MiB, 128 * MiB, 512 * MiB, 1024 * MiB],
        "iters": 10,
        "warmup": 2,
        "collectives": ["allreduce", "allgather", "reducescatter"],
    },
    ("cuda", "deep"): {
        "sizes": [1 * MiB, 16 * MiB, 128 * MiB, 512 * MiB, 1024 * MiB],
        "iters": 50,
        "warmup": 5,
        "collectives": ["allreduce", "allgather", "reducescatter"],
    },
}
FACTORS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
}
PAIR_BYTES = 8 * MiB
COMM_SHARE = 0.5  # of the check's limit, for the rendezvous and each collective across nodes


def run(ctx: CheckContext) -> CheckResult:
    from gpuenv.verify import ranks
    from gpuenv.verify.spread import Hung

    here = common.world_size(ctx.device, ctx.cpu_ranks)
    if here < 1:
        raise common.CudaUnusable("CUDA reports no GPU visible to this process")
    spread = spread_of(ctx, here) if ctx.placement else None
    world = spread.world if spread else here
    plan = {**PLANS[(ctx.device, ctx.level)], "bisect": ctx.level != "quick" and world >= 3}
    try:
        results = ranks.launch(
            "gpuenv.verify.checks.allreduce:rank_workload",
            check="allreduce",
            world=world,
            device=ctx.device,
            params=plan,
            spread=spread,
        )
    except Hung as exc:
        ctx.provided["multi_node"] = {"hung": [{"rank": r, "node": n, "why": w} for r, n, w in exc.who]}
        return CheckResult("allreduce", "timeout", summary=str(exc), findings=nodes.hung_finding(exc.who))
    baselines = load_baselines(common.path_or_none(ctx.baseline))
    gpu_name = common.device_name(ctx.device)
    refs = [_ref(ctx, spread, r) for r in range(world)]
    findings, metrics = evaluate(
        results, world=world, device=ctx.device, gpu_name=gpu_name, baselines=baselines, refs=refs
    )
    summary_nodes = ""
    if spread is not None:
        summary_nodes = across_nodes(results, spread, findings, metrics, judge_speed=ctx.device == "cuda")
        ctx.provided["multi_node"] = metrics["multi_node"]
    status = status_from_findings(findings)
    head = metrics.get("headline", {})
    summary = (
        f"{world} ranks ({'gloo' if ctx.device == 'cpu' else 'nccl'}), every element exact"
        if status != "fail" or not any(f.item == "correctness" for f in findings)
        else ""
    )
    if world < 2:
        summary += "; one rank: nothing crosses a link, bandwidth not measured"
    elif head:
        bw = head.get("busbw_gbps")
        summary += f"; {head['collective']} {head['bytes'] // MiB} MiB " + (
            f"busbw {bw:.2f} GB/s" if bw is not None else f"algbw {head['algbw_gbps']:.2f} GB/s"
        )
    summary += summary_nodes
    return CheckResult("allreduce", status, summary=summary.lstrip("; "), metrics=metrics, findings=findings)


def spread_of(ctx: CheckContext, here: int) -> Spread:
    """This node's share of a run across nodes: explicit flags start one rank per local device;
    a launcher (srun, torchrun) started this process as one rank."""
    p = ctx.placement or {}
    if p["launcher"] == "explicit":
        first = p["node_rank"] * here
        ranks_here, devices, world = tuple(range(first, first + here)), tuple(range(here)), p["nnodes"] * here
    else:
        ranks_here, world = (p["rank"],), p["world"]
        devices = (p["local_rank"] if ctx.device == "cuda" and here > 1 else 0,)
    limit = ctx.limit_s or 90.0
    return Spread(
        ranks=ranks_here,
        devices=devices,
        world=world,
        addr=p["master_addr"],
        port=p["master_port"],
        prefix=f"gpuenv/{p['job']}/allreduce/",
        timeout_s=max(3.0, limit * COMM_SHARE),
        node=p["node"],
        host_store=p["hosts_store"],
    )


def _ref(ctx: CheckContext, spread: Spread | None, rank: int) -> GpuRef:
    if ctx.device != "cuda":
        return GpuRef(rank)
    if spread is None:
        return ctx.gpu_ref(rank)
    if rank in spread.ranks:
        return ctx.gpu_ref(spread.devices[spread.ranks.index(rank)])
    return GpuRef(rank)


def across_nodes(
    results: list[dict[str, Any]],
    spread: Spread,
    findings: list[Finding],
    metrics: dict[str, Any],
    *,
    judge_speed: bool,
) -> str:
    """The node figures (intra, inter, pairs) into metrics and findings; a summary tail."""
    rank_nodes = [r["node"] for r in results]
    table = nodes.figures(results, rank_nodes)
    findings += nodes.node_findings(table, judge_speed=judge_speed)
    named, _flagged = nodes.suspects(table["pairs"], judge_speed=judge_speed)
    wrong = sorted({rank_nodes[res["rank"]] for res in results if res["errors"]})
    mine = table["intra"].get(spread.node, {}).get("busbw_gbps")
    inter = (table["inter"] or {}).get("busbw_gbps")
    if mine is not None:
        metrics["intra_node_busbw_gbps"] = mine
    if inter is not None:
        metrics["inter_node_busbw_gbps"] = inter
    metrics["multi_node"] = {
        "nodes": [{"node": n, "ranks": rs} for n, rs in nodes.layout(rank_nodes)],
        "intra_node": table["intra"],
        "inter_node": table["inter"],
        "node_pairs": table["pairs"],
        "suspect_nodes": sorted(set(named) | set(wrong)),
    }
    nnodes = len(table["intra"])
    tail = f"; {nnodes} node(s)"
    tail += f", inter-node busbw {inter:.2f} GB/s" if inter is not None else ", one node: nothing crosses nodes"
    if mine is not None:
        tail += f", intra-node busbw on {spread.node} {mine:.2f} GB/s"
    return tail


# ---- the rank side (runs in each rank process) --------------------------------------------


def rank_workload(rank: int, world: int, device: str, params: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    dev = torch.device("cuda", params.get("device_index", rank)) if device == "cuda" else torch.device("cpu")
    out: dict[str, Any] = {"rank": rank, "device": str(dev), "errors": [], "times": {}, "skipped": {}, "pairs": []}
    if params.get("rank_nodes"):
        out["node"] = params["rank_nodes"][rank]
    for coll in params["collectives"]:
        for nbytes in params["sizes"]:
            try:
                times = _run_size(coll, nbytes, rank, world, dev, params, out["errors"])
            except RuntimeError as exc:
                if "not supported" not in str(exc).lower() and "unsupported" not in str(exc).lower():
                    raise
                out["skipped"][coll] = str(exc).splitlines()[0]
                break
            out["times"][f"{coll}:{nbytes}"] = times
    if params.get("bisect"):
        out["pairs"] = _pairs(rank, world, dev, params)
    if params.get("rank_nodes"):
        out["nodes"] = _node_collectives(rank, dev, params, out["errors"])
    if world >= 2:  # DDP rides on this job's process group: one NCCL initialisation for both
        out["ddp"] = ddp_step(rank, dev)
    dist.barrier()
    return out


def ddp_step(rank: int, dev: Any) -> dict[str, Any]:
    """One DDP step on this rank (different data per rank); parameters must agree afterwards."""
    torch = common.torch_module()
    from torch.nn.parallel import DistributedDataParallel

    from gpuenv.verify.checks.amp import PlainSGD, model_for

    model = model_for(dev)
    ddp = DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = PlainSGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64, 64, generator=gen).to(dev)
    y = torch.randint(0, 10, (64,), generator=gen).to(dev)
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
    opt.step()
    flat = torch.cat([p.detach().double().flatten().cpu() for p in model.parameters()])
    return {"checksum": f"{float(flat.sum()):.17g}", "finite": bool(torch.isfinite(flat).all())}


def _run_size(
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
    import torch.distributed as dist

    from gpuenv.verify import ranks

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
    for it in range(params["warmup"] + params["iters"]):
        # Each collective's result minus its exact expectation must be zero everywhere.
        if coll == "allreduce":
            torch.add(base, (rank + 1) * (it + 1), out=result)
            dist.barrier(group=group)
            common.sync(dev)
            t0 = time.perf_counter()
            dist.all_reduce(result, group=group)
            common.sync(dev)
            elapsed = time.perf_counter() - t0
            offset = (it + 1) * world * (world + 1) // 2
            subtract = partial(_minus_times, part=base, times=world)
        elif coll == "allgather":
            torch.add(base, rank + it, out=mine_in)
            dist.barrier(group=group)
            common.sync(dev)
            t0 = time.perf_counter()
            gather_into(gathered, mine_in, group=group)
            common.sync(dev)
            elapsed = time.perf_counter() - t0
            result = gathered.view(world, size).sub_(torch.arange(world, device=dev).view(-1, 1))
            offset = it
            subtract = partial(_minus_times, part=base, times=1)
        else:
            torch.add(base, rank + it, out=full)
            dist.barrier(group=group)
            common.sync(dev)
            t0 = time.perf_counter()
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


def gather_into(output: Any, mine: Any, *, group: Any) -> None:
    """All-gather into one flat tensor (no list, no copy through a flat buffer in the timed region);
    torch 2.13 names it all_gather_single, older releases all_gather_into_tensor."""
    import torch.distributed as dist

    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(output, mine, group=group)


def scatter_from(output: Any, full: Any, *, group: Any) -> None:
    """Reduce-scatter from one flat tensor (reduce_scatter_single, or reduce_scatter_tensor)."""
    import torch.distributed as dist

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


def torch_count(mask: Any) -> int:
    import torch

    return int(torch.count_nonzero(mask).item())


def _pairs(rank: int, world: int, dev: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every neighbouring pair of ranks runs its own allreduce, to name the GPU or link at fault."""
    import torch.distributed as dist

    pairs = [(i, (i + 1) % world) for i in range(world)]
    groups = [dist.new_group(list(p)) for p in pairs]
    found = []
    for pair, group in zip(pairs, groups, strict=True):
        if rank not in pair:
            continue
        errors: list[dict[str, Any]] = []
        small = {"warmup": 1, "iters": 3, "fault": params.get("fault")}
        times = _run_size(
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


def _node_collectives(rank: int, dev: Any, params: dict[str, Any], errors: list[dict[str, Any]]) -> dict[str, Any]:
    """Across nodes: this node's ranks among themselves (intra), one rank per node (inter), and each
    node with the next (node pairs, from three nodes on). Every rank creates every group, in order."""
    import torch.distributed as dist

    placed = nodes.layout(params["rank_nodes"])
    nbytes = params["sizes"][-1]
    small = {"warmup": params["warmup"], "iters": params["iters"], "fault": params.get("fault")}
    intra_groups = [dist.new_group(members) for _node, members in placed]
    leaders = [members[0] for _node, members in placed]
    inter_group = dist.new_group(leaders) if len(placed) >= 2 else None
    ring = [(i, (i + 1) % len(placed)) for i in range(len(placed))] if len(placed) >= 3 else []
    pair_groups = [dist.new_group(sorted({leaders[a], leaders[b]})) for a, b in ring]
    mine = next(i for i, (_n, members) in enumerate(placed) if rank in members)
    node, members = placed[mine]
    out: dict[str, Any] = {"intra": None, "inter": None, "pairs": []}
    if len(members) >= 2:
        times = _run_size(
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
        times = _run_size(
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
        times = _run_size(
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


# ---- evaluation (pure) --------------------------------------------------------------------


def bandwidth(coll: str, nbytes: int, seconds: float, world: int) -> tuple[float, float | None]:
    """(algbw, busbw) in GB/s with the nccl-tests definitions; busbw is None for one rank."""
    algbw = nbytes / seconds / 1e9
    if world < 2:
        return algbw, None
    return algbw, algbw * FACTORS[coll](world)


def evaluate(
    results: list[dict[str, Any]], *, world: int, device: str, gpu_name: str, baselines: Baselines, refs: list[GpuRef]
) -> tuple[list[Finding], dict[str, Any]]:
    findings = _correctness(results, refs) + _pair_findings(results, refs) + ddp_findings(results)
    table = _bandwidth_table(results, world) if world >= 2 else []
    findings += _judge_bandwidth(table, world=world, device=device, gpu_name=gpu_name, baselines=baselines)
    for coll, why in results[0].get("skipped", {}).items():
        findings.append(finding("allreduce.not-supported", f"{coll} not supported by this backend: {why}", item=coll))
    if world < 2:
        findings.append(finding("allreduce.ddp-one-rank", "DDP step skipped: one rank"))
    headline = next((row for row in reversed(table) if row["collective"] == "allreduce"), table[-1] if table else {})
    return findings, {
        "world": world,
        "backend": "nccl" if device == "cuda" else "gloo",
        "sizes": table,
        "headline": headline,
        "busbw_gbps": headline.get("busbw_gbps"),
        "algbw_gbps": headline.get("algbw_gbps"),
    }


def ddp_findings(results: list[dict[str, Any]]) -> list[Finding]:
    """Pure: after a DDP step every rank holds the same, finite parameters."""
    steps = [(r["rank"], r["ddp"]) for r in results if "ddp" in r]
    if not steps or (len({d["checksum"] for _, d in steps}) == 1 and all(d["finite"] for _, d in steps)):
        return []
    sums_text = ", ".join(f"rank {rank}={d['checksum']}" for rank, d in steps)
    return [finding("allreduce.ddp-disagree", f"DDP step: ranks disagree after one step ({sums_text})")]


def _correctness(results: list[dict[str, Any]], refs: list[GpuRef]) -> list[Finding]:
    findings = []
    for res in results:
        for err in res["errors"]:
            ref = refs[res["rank"]]
            on = f" on node {res['node']}" if res.get("node") else ""
            where = f"rank {res['rank']}{on} ({ref.label() if ref.uuid else res['device']})"
            message = (
                f"{where} got {err['wrong']} wrong element(s) of {err['elements']} in "
                f"{err['collective']} of {err['bytes'] // MiB} MiB, iteration {err['iteration']}: "
                f"element {err['index']} off by {err['off_by']:g}"
            )
            findings.append(finding("allreduce.wrong-result", message, gpu=ref))
    return findings


def _pair_findings(results: list[dict[str, Any]], refs: list[GpuRef]) -> list[Finding]:
    bad_pairs = {tuple(p["pair"]) for r in results for p in r.get("pairs", []) if p["wrong"]}
    if not bad_pairs:
        return []
    counts: dict[int, int] = {}
    for pair in bad_pairs:
        for member in pair:
            counts[member] = counts.get(member, 0) + 1
    suspects = [r for r, n in counts.items() if n > 1] or sorted(counts)
    names = ", ".join(refs[r].label() for r in sorted(suspects))
    pairs = ", ".join(f"{a}-{b}" for a, b in sorted(bad_pairs))
    message = f"pairwise allreduce fails on pairs {pairs}: suspect {names}"
    return [finding("allreduce.pair-suspect", message, gpu=refs[suspects[0]] if len(suspects) == 1 else None)]


def _bandwidth_table(results: list[dict[str, Any]], world: int) -> list[dict[str, Any]]:
    table = []
    for key in results[0]["times"]:
        coll, nbytes_s = key.split(":")
        nbytes = int(nbytes_s)
        # The collective is as slow as its slowest rank.
        seconds = max(sum(r["times"][key]) / len(r["times"][key]) for r in results)
        algbw, busbw = bandwidth(coll, nbytes, seconds, world)
        table.append(
            {
                "collective": coll,
                "bytes": nbytes,
                "time_us": round(seconds * 1e6, 1),
                "algbw_gbps": round(algbw, 3),
                "busbw_gbps": None if busbw is None else round(busbw, 3),
            }
        )
    return table


def _judge_bandwidth(
    table: list[dict[str, Any]], *, world: int, device: str, gpu_name: str, baselines: Baselines
) -> list[Finding]:
    if world < 2:
        return [finding("allreduce.one-rank", "one rank: a collective is a no-op, no bandwidth to measure")]
    findings = []
    judged = False
    for row in table:
        expected = (
            baselines.expected_busbw(gpu_name, world, row["collective"], row["bytes"]) if device == "cuda" else None
        )
        if expected is None:
            continue
        judged = True
        verdict = baselines.judge(row["busbw_gbps"], expected)
        text = (
            f"{row['collective']} {row['bytes'] // MiB} MiB busbw {row['busbw_gbps']:.1f} GB/s "
            f"vs {expected:.0f} expected for {world}x {gpu_name}"
        )
        if verdict == "fail":
            findings.append(finding("allreduce.busbw-low", text + f" (under {baselines.fail_below:.0%})"))
        elif verdict == "warn":
            message = text + f" (under {baselines.warn_below:.0%})"
            findings.append(finding("allreduce.busbw-under-expected", message))
    if not judged:
        where = "CPU (gloo)" if device == "cpu" else f"{world}x {gpu_name} at these sizes"
        message = f"no baseline for {where}: bandwidth reported, correctness judged"
        findings.append(finding("allreduce.no-baseline", message))
    return findings
