"""Localisation across nodes as the ranks run it (search.py decides what to measure; this measures).

`prepare`, before any collective of the run: every group the level's rounds can reach is created
(torch's new_group needs every rank: a rank that hangs later cannot be localised this way, and is
named by the board as before). `localise`, after the run's own collectives: when the level or the
figures call for it, the rounds — each rank measures its group of the round (the groups of a round
at once), every rank's times are gathered to every rank, and each takes the same next step from the
same figures: no relaunch, no coordinator. Time is bounded per level (rounds, and a share of the
check's limit), and a budget that stopped the search is said.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from gpuenv.verify import nodes, ranks
from gpuenv.verify.checks.allreduce.collectives import MiB, faulty, timed_collective
from gpuenv.verify.checks.allreduce.search import Group, Search

# The message each group reduces: on GPUs large enough that busbw is the link's; on the CPU small
# enough to be quick, large enough that a median of five rides out the scheduler's noise.
BYTES = {"cpu": 4 * MiB, "cuda": 256 * MiB}
WARMUP, ITERS = 1, 5
# How wide a step in the groups' sorted busbw must be (lower over higher, at most) to part slow
# groups from fine: 2x on GPUs; 4x on the CPU, whose gloo ranks share the host's cores with
# everything else (healthy groups there spread by up to 3x, in small steps).
SHARE = {"cpu": 0.25, "cuda": 0.5}


@dataclass(frozen=True)
class Budget:
    rounds: int  # rounds after the whole, at most (the groups they can reach are created up front)
    share: float  # of the check's time limit


BUDGETS = {"quick": Budget(2, 0.2), "standard": Budget(3, 0.25), "deep": Budget(10, 0.3)}


def plan(
    *, level: str, device: str, limit_s: float, expected: dict[str, Any] | None, judge_pairs: bool
) -> dict[str, Any]:
    """What the ranks are told: the level's budget, the message, the margin, and what may set the
    search off besides the deep level — the collective under its expectation (`expected`: gbps,
    below, source), or (GPUs) a node pair over twice the median pair."""
    budget = BUDGETS[level]
    return {
        "level": level,
        "expected": expected,
        "judge_pairs": judge_pairs,
        "rounds": budget.rounds,
        "seconds": round(budget.share * limit_s, 1),
        "bytes": BYTES[device],
        "share": SHARE[device],
    }


@dataclass(frozen=True)
class Prepared:
    search: Search
    groups: dict[tuple[int, ...], Any]  # a group's ranks -> its process group
    names: list[str]  # node names by index
    setup_s: float


def prepare(params: dict[str, Any]) -> Prepared | str:
    """Every group the level's rounds can reach, created now; or why no localisation can run."""
    want = params["localise"]
    placed = nodes.layout(params["rank_nodes"])
    if len(placed) < 2:
        return "one node: nothing crosses nodes"
    if want["level"] != "deep" and want["expected"] is None and not want["judge_pairs"]:
        return (
            f"at {want['level']} only when the collective is below its expectation, and none is known "
            "for it (a baseline row for this count; --level deep localises always)"
        )
    import torch.distributed as dist  # torch: heavy, needed in the rank processes only

    started = time.perf_counter()
    search = Search([members for _, members in placed], want["share"])
    groups = {g.ranks: dist.new_group(list(g.ranks)) for g in search.reachable(want["rounds"])}
    return Prepared(search, groups, [name for name, _ in placed], time.perf_counter() - started)


def localise(
    prepared: Prepared | str, rank: int, world: int, dev: Any, params: dict[str, Any], out: dict[str, Any]
) -> dict[str, Any]:
    """The search's rounds, when the level or the run's figures call for it; what they found."""
    if isinstance(prepared, str):
        return {"ran": False, "why": prepared}
    want = params["localise"]
    started = time.perf_counter()
    head = max(params["sizes"])
    own = out["times"].get(f"allreduce:{head}")
    every = ranks.gather(
        {"head": statistics.mean(own) if own else None, "pairs": out["nodes"]["pairs"], "setup": prepared.setup_s},
        world,
    )
    done = {
        "budget": {"rounds": want["rounds"], "seconds": want["seconds"]},
        "setup_s": round(max(e["setup"] for e in every), 3),
    }
    below = _below(want["expected"], every, head, world)
    pairs = {tuple(p["pair"]): p for e in every for p in e["pairs"]}
    slow_pairs = nodes.slow_pairs(list(pairs.values())) if want["judge_pairs"] else []
    why = below or (
        f"node pairs {', '.join(f'{a}-{b}' for a, b in slow_pairs)} are over twice the median pair"
        if slow_pairs
        else "the deep level localises always"
        if want["level"] == "deep"
        else None
    )
    if why is None:
        met = "the collective met its expectation" if want["expected"] else "no expectation, no slow node pair"
        return {"ran": False, "why": met, **done}
    search = prepared.search
    search.whole_below = below is not None
    exceeded, elapsed = _rounds(search, prepared, rank, world, dev, params, out["errors"], started)
    outcome = search.outcome()
    return {
        "ran": True,
        "why": why,
        **done,
        "bytes": want["bytes"],
        "iterations": ITERS,
        "share": want["share"],
        "seconds": round(elapsed, 3),
        "exceeded": exceeded,
        "rounds": rounds_table(search, prepared.names),
        "outcome": outcome.kind,
        "nodes": [prepared.names[n] for n in outcome.nodes],
    }


def _below(expected: dict[str, Any] | None, every: list[dict[str, Any]], head: int, world: int) -> str | None:
    """Why the whole collective (its largest allreduce, as slow as its slowest rank) is under its
    expectation, or None."""
    heads = [e["head"] for e in every if e["head"]]
    if expected is None or len(heads) < len(every):
        return None
    busbw = nodes.busbw(head, max(heads), world)[1]
    if busbw >= expected["gbps"] * expected["below"]:
        return None
    return (
        f"the collective's busbw {busbw:.3g} GB/s is under {expected['below']:.0%} of the "
        f"{expected['gbps']:g} GB/s expected ({expected['source']})"
    )


def _rounds(
    search: Search,
    prepared: Prepared,
    rank: int,
    world: int,
    dev: Any,
    params: dict[str, Any],
    errors: list[dict[str, Any]],
    started: float,
) -> tuple[str | None, float]:
    """Measure round after round until the search ends or the budget stops it: (what stopped it, seconds)."""
    want = params["localise"]
    elapsed = longest = 0.0
    for number, (label, groups) in enumerate(search.rounds()):
        if number > want["rounds"]:
            return f"the {want['level']} level's {want['rounds']} rounds were spent", elapsed
        if number and elapsed + longest > want["seconds"]:
            return f"a round more would overrun the {want['level']} level's {want['seconds']:g} s", elapsed
        mine = next((g for g in groups if rank in g.ranks), None)
        times = _measure(mine, prepared, rank, dev, params, errors) if mine else []
        every = ranks.gather({"times": times, "elapsed": time.perf_counter() - started}, world)
        search.record(number, label, [_figure(g, every, want["bytes"]) for g in groups])
        now = max(e["elapsed"] for e in every)
        longest, elapsed = max(longest, now - elapsed), now
    return None, elapsed


def _measure(
    group: Group, prepared: Prepared, rank: int, dev: Any, params: dict[str, Any], errors: list[dict[str, Any]]
) -> list[float]:
    names = "+".join(prepared.names[n] for n in group.nodes)
    return timed_collective(
        "allreduce",
        params["localise"]["bytes"],
        group.ranks.index(rank),
        len(group.ranks),
        dev,
        {**faulty(params), "warmup": WARMUP, "iters": ITERS},
        errors,
        group=None if group.kind == "whole" else prepared.groups[group.ranks],
        tag=f" localising, nodes {names}",
    )


def _figure(group: Group, every: list[dict[str, Any]], nbytes: int) -> tuple[Group, float, float]:
    """(group, seconds, busbw): each iteration as slow as the group's slowest rank, the median of them."""
    per_iteration = [max(every[r]["times"][i] for r in group.ranks) for i in range(ITERS)]
    seconds = statistics.median(per_iteration)
    return group, seconds, nodes.busbw(nbytes, seconds, len(group.ranks))[1]


def rounds_table(search: Search, names: list[str]) -> list[dict[str, Any]]:
    """The rounds as the report shows them: each group's nodes, busbw and verdict (slow, fine, unjudged)."""
    table: list[dict[str, Any]] = []
    for m in search.measured:
        if not table or table[-1]["round"] != m.round:
            table.append({"round": m.round, "label": m.label, "groups": []})
        table[-1]["groups"].append(
            {
                "nodes": [names[n] for n in m.group.nodes],
                "witnesses": [names[n] for n in m.group.witnesses],
                "ranks": len(m.group.ranks),
                "time_us": round(m.seconds * 1e6, 1),
                "busbw_gbps": round(m.busbw, 4),
                "verdict": search.verdict(m),
            }
        )
    return table
