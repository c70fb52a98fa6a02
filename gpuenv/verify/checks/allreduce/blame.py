"""What the localisation across nodes means for this node's verdict (pure): the node it names fails,
every other node is certified with a note naming it; a slow link is a note on every node (neither end
is at fault); the whole collective's slowness is held against no node the search cleared. Nothing
named, or the search not run: the findings stay as they were."""

from __future__ import annotations

import statistics
from typing import Any

from gpuenv.verify import nodes
from gpuenv.verify.catalogue import finding
from gpuenv.verify.model import Finding


def findings(loc: dict[str, Any] | None, *, me: str, intra: dict[str, dict[str, Any]]) -> list[Finding]:
    """This node's findings from the localisation `loc` (the `localisation` every rank returns)."""
    if not loc or not loc.get("ran"):
        return []
    outcome, named, rounds = loc["outcome"], loc["nodes"], trail(loc)
    if outcome == "slow node" and named == [me]:
        message = f"node {me} is the slow node: every group holding it was slow, the others fine ({rounds}); "
        return [finding("allreduce.slow-node", message + where(me, intra), item=me)]
    if outcome == "slow node":
        message = (
            f"node {named[0]} slows the collective across nodes ({loc['why']}); named in {_count(loc)}: "
            f"{rounds}; this node's own groups were fine"
        )
        return [finding("allreduce.slow-node-elsewhere", message, item=named[0])]
    if outcome == "slow link":
        a, b = named
        message = (
            f"the link between {a} and {b} is slow: their pair is slow while each is fine with other nodes "
            f"({loc['why']}); named in {_count(loc)}: {rounds}"
        )
        return [finding("allreduce.slow-link", message, item=f"{a}-{b}")]
    stopped = f"; stopped: {loc['exceeded']}" if loc.get("exceeded") else ""
    if outcome == "nothing slow":
        message = f"no group was slower than the others: nothing named ({rounds}){stopped}"
        return [finding("allreduce.nothing-localised", message)]
    left = f" (still under suspicion: {', '.join(named)})" if named else ""
    message = f"the collective across nodes is slow ({loc['why']}) but no node or link could be named{left}: {rounds}"
    return [finding("allreduce.not-localised", message + stopped)]


def cleared(found: list[Finding], loc: dict[str, Any] | None, *, me: str) -> list[Finding]:
    """`found` without the bandwidth warnings and failures of the whole collective, where the search
    named another node or a link for them."""
    if not loc or not loc.get("ran"):
        return found
    elsewhere = loc["outcome"] == "slow link" or (loc["outcome"] == "slow node" and loc["nodes"] != [me])
    return [f for f in found if not (elsewhere and f.item == "bandwidth" and f.severity != "info")]


def where(me: str, intra: dict[str, dict[str, Any]]) -> str:
    """What the node's own figures say of the fault: its GPUs (its ranks slow among themselves too),
    or its network path (they are as fast as the other nodes')."""
    mine = intra.get(me, {}).get("busbw_gbps")
    others = [row["busbw_gbps"] for node, row in intra.items() if node != me and row.get("busbw_gbps")]
    if mine is None:
        return "one rank on the node: its device and its network path cannot be told apart"
    if not others:
        return f"its ranks reach {mine:.3g} GB/s among themselves, with no other node's figure to compare"
    usual = statistics.median(others)
    if mine < nodes.SLOW_NODE * usual:
        return (
            f"its own ranks are slow among themselves too (intra-node busbw {mine:.3g} GB/s, the other nodes "
            f"{usual:.3g}): look at its GPUs and the links between them"
        )
    return (
        f"among themselves its ranks are as fast as the other nodes' ({mine:.3g} GB/s, the others {usual:.3g}): "
        "look at its NIC, cable and switch port"
    )


def trail(loc: dict[str, Any]) -> str:
    """The rounds in a line: each group's nodes and busbw, and whether it was slow."""
    parts = []
    for r in loc["rounds"]:
        groups = ", ".join(
            f"{'+'.join(g['nodes'])} {g['busbw_gbps']:.3g}" + ("" if g["verdict"] == "fine" else f" {g['verdict']}")
            for g in r["groups"]
        )
        parts.append(f"{r['label']} {groups}")
    return "; ".join(parts) + " GB/s"


def summary(loc: dict[str, Any] | None) -> str:
    """The check summary's tail: what the search found, in how many rounds and seconds."""
    if not loc or not loc.get("ran"):
        return ""
    found = {"slow node": "slow node ", "slow link": "slow link "}.get(loc["outcome"], loc["outcome"])
    if loc["outcome"] in ("slow node", "slow link"):
        found += "-".join(loc["nodes"])
    return f"; localised in {_count(loc)} (+{loc['seconds'] + loc['setup_s']:.1f} s): {found}"


def _count(loc: dict[str, Any]) -> str:
    rounds = len(loc["rounds"]) - 1  # after the whole
    return f"{rounds} round{'s' if rounds != 1 else ''}"
