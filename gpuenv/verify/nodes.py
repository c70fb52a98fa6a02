"""Pure evaluation of a collective run across nodes: intra- and inter-node busbw, the node pairs.

Definitions are nccl-tests': algbw = bytes / time, busbw = algbw x 2(n-1)/n for allreduce. Intra-node
busbw is each node's own ranks reducing among themselves (n = ranks on that node); inter-node busbw
is one rank per node reducing across the nodes (n = nodes), so the figure is the network's, not
NVLink's. A collective is as slow as its slowest rank. Node pairs (each node with the next, in a
ring, from three nodes on) find the node at fault: a node in two pairs with wrong elements is the
suspect; a pair over twice the median pair sets the localisation off (checks/allreduce/localise.py),
which names the slow node or link.
"""

from __future__ import annotations

import statistics
from typing import Any

from gpuenv.verify.catalogue import finding
from gpuenv.verify.model import Finding

SLOW_NODE = 0.75  # a node's intra-node busbw under this share of the nodes' reference
SLOW_PAIR = 2.0  # a node pair slower than this many times the median pair


def layout(rank_nodes: list[str]) -> list[tuple[str, list[int]]]:
    """Nodes in the order of their first rank, each with its ranks."""
    order: dict[str, list[int]] = {}
    for rank, node in enumerate(rank_nodes):
        order.setdefault(node, []).append(rank)
    return list(order.items())


def busbw(nbytes: int, seconds: float, n: int) -> tuple[float, float]:
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (n - 1) / n


def figures(results: list[dict[str, Any]], rank_nodes: list[str]) -> dict[str, Any]:
    """Per-node intra-node figures and the inter-node figure from every rank's `nodes` entry."""
    per_node: dict[str, dict[str, Any]] = {}
    for node, ranks in layout(rank_nodes):
        runs = [results[r]["nodes"]["intra"] for r in ranks if results[r].get("nodes", {}).get("intra")]
        if len(ranks) < 2 or not runs:
            per_node[node] = {"ranks": len(ranks), "busbw_gbps": None, "why": "one rank on this node"}
            continue
        seconds, nbytes = max(r["time"] for r in runs), runs[0]["bytes"]
        algbw, bus = busbw(nbytes, seconds, len(ranks))
        per_node[node] = _row(len(ranks), nbytes, seconds, algbw, bus)
    inter_runs = [r["nodes"]["inter"] for r in results if r.get("nodes", {}).get("inter")]
    inter: dict[str, Any] | None = None
    nnodes = len(per_node)
    if nnodes >= 2 and inter_runs:
        seconds, nbytes = max(r["time"] for r in inter_runs), inter_runs[0]["bytes"]
        algbw, bus = busbw(nbytes, seconds, nnodes)
        inter = {"nodes": nnodes, **_row(nnodes, nbytes, seconds, algbw, bus)}
        del inter["ranks"]
    pairs = {tuple(p["pair"]): p for r in results for p in r.get("nodes", {}).get("pairs", [])}
    return {"intra": per_node, "inter": inter, "pairs": [pairs[k] for k in sorted(pairs)]}


def _row(ranks: int, nbytes: int, seconds: float, algbw: float, bus: float) -> dict[str, Any]:
    return {
        "ranks": ranks,
        "bytes": nbytes,
        "time_us": round(seconds * 1e6, 1),
        "algbw_gbps": round(algbw, 3),
        "busbw_gbps": round(bus, 3),
    }


def node_findings(table: dict[str, Any], *, judge_speed: bool = True) -> list[Finding]:
    """A node whose intra-node busbw is well under the others' (judging speed); the node two pairs
    with wrong elements share."""
    slow = _slow_nodes(table["intra"]) if judge_speed else []
    return slow + _pair_suspects(table["pairs"])


def _slow_nodes(intra: dict[str, dict[str, Any]]) -> list[Finding]:
    measured = {node: row["busbw_gbps"] for node, row in intra.items() if row.get("busbw_gbps")}
    if len(measured) < 2:
        return []
    # two nodes: the faster is the reference; more: the median (one fast node cannot flag the rest)
    reference = max(measured.values()) if len(measured) == 2 else statistics.median(measured.values())
    found = []
    for node, value in measured.items():
        if value < SLOW_NODE * reference:
            message = (
                f"node {node}: intra-node busbw {value:.2f} GB/s is under {SLOW_NODE:.0%} of the nodes' "
                f"{reference:.2f} GB/s"
            )
            found.append(finding("allreduce.node-slow", message, item=node))
    return found


def suspects(pairs: list[dict[str, Any]]) -> tuple[list[str], list[tuple[str, str]]]:
    """(suspect nodes, flagged pairs): pairs with wrong elements; the node two of them share, else
    both nodes of each. A slow pair is the localisation's to place (checks/allreduce/localise.py)."""
    flagged = [(p["pair"][0], p["pair"][1]) for p in pairs if p["wrong"]]
    counts: dict[str, int] = {}
    for pair in flagged:
        for node in pair:
            counts[node] = counts.get(node, 0) + 1
    named = [n for n, c in counts.items() if c > 1] or sorted(counts)
    return sorted(named), flagged


def slow_pairs(pairs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The node pairs over SLOW_PAIR x the median pair's time."""
    if not pairs:
        return []
    limit = SLOW_PAIR * statistics.median(p["time"] for p in pairs)
    return [(p["pair"][0], p["pair"][1]) for p in pairs if p["time"] > limit]


def _pair_suspects(pairs: list[dict[str, Any]]) -> list[Finding]:
    named, flagged = suspects(pairs)
    if not flagged:
        return []
    what = ", ".join(f"{a}-{b}" for a, b in flagged)
    message = f"node pairs {what} got wrong elements: suspect node {', '.join(named)}"
    return [finding("allreduce.node-pair-suspect", message, item=",".join(named))]


def hung_finding(who: list[tuple[int | None, str, str]]) -> list[Finding]:
    return [
        finding(
            "allreduce.peer-hung", f"rank {r} on node {node} {why}" if r is not None else f"{node}: {why}", item=node
        )
        for r, node, why in who
    ]
