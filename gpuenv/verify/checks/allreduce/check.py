"""The allreduce check as the worker runs it: the plan for the device and level, the ranks started
(here, or this node's share of a run across nodes), their results judged (judging.py)."""

from __future__ import annotations

from typing import Any

from gpuenv.verify import nodes, ranks
from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.checks.allreduce import localise
from gpuenv.verify.checks.allreduce.collectives import MiB
from gpuenv.verify.checks.allreduce.judging import Judge, across_nodes, evaluate
from gpuenv.verify.context import CheckContext
from gpuenv.verify.expectations import load_expectations
from gpuenv.verify.model import CheckResult, GpuRef, status_from_findings
from gpuenv.verify.spread import Hung, Spread
from gpuenv.verify.workloads import common

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
COMM_SHARE = 0.5  # of the check's limit, for the rendezvous and each collective across nodes


def run(ctx: CheckContext) -> CheckResult:
    here = common.world_size(ctx.device, ctx.cpu_ranks)
    if here < 1:
        raise common.CudaUnusable("CUDA reports no GPU visible to this process")
    spread = spread_of(ctx, here) if ctx.placement else None
    world = spread.world if spread else here
    plan = {**PLANS[(ctx.device, ctx.level)], **pair_plan(ctx.level, world, across_nodes=spread is not None)}
    baselines = load_baselines(common.path_or_none(ctx.baseline))
    gpu_name = common.gpu_model(ctx) if ctx.device == "cuda" else "cpu"
    expectations = load_expectations()
    if spread is not None:
        judge = Judge(world=world, device=ctx.device, gpu_name=gpu_name, baselines=baselines, expectations=expectations)
        plan["localise"] = _localise_plan(ctx, judge, max(plan["sizes"]))
    try:
        results = ranks.launch(
            "gpuenv.verify.checks.allreduce.workload:rank_workload",
            check="allreduce",
            world=world,
            device=ctx.device,
            params=plan,
            spread=spread,
        )
    except Hung as exc:
        ctx.provided["multi_node"] = {"hung": [{"rank": r, "node": n, "why": w} for r, n, w in exc.who]}
        return CheckResult("allreduce", "timeout", summary=str(exc), findings=nodes.hung_finding(exc.who))
    refs = [_ref(ctx, spread, r) for r in range(world)]
    findings, metrics = evaluate(
        results,
        world=world,
        device=ctx.device,
        gpu_name=gpu_name,
        baselines=baselines,
        refs=refs,
        expectations=expectations,
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


def pair_plan(level: str, world: int, *, across_nodes: bool) -> dict[str, Any]:
    """Pairs from three ranks on: ring neighbours at quick, every pair at standard and deep on one
    node (across nodes, ring neighbours at standard and deep only: every pair of hundreds of ranks
    is too many)."""
    if across_nodes:
        return {"bisect": world >= 3 and level != "quick", "pairs": "ring"}
    return {"bisect": world >= 3, "pairs": "ring" if level == "quick" else "all"}


def _localise_plan(ctx: CheckContext, judge: Judge, nbytes: int) -> dict[str, Any]:
    """The localisation's plan for the ranks: the level's budget, and what the whole collective
    (its allreduce of nbytes) is expected to reach."""
    return localise.plan(
        level=ctx.level,
        device=ctx.device,
        limit_s=_limit(ctx),
        expected=judge.expected(nbytes),
        judge_pairs=ctx.device == "cuda",
    )


def _limit(ctx: CheckContext) -> float:
    return ctx.limit_s or 90.0


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
    limit = _limit(ctx)
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
