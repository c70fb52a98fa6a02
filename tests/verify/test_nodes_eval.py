"""The evaluation of a collective run across nodes (pure): busbw per node and across, node pairs,
and the board that names a hung peer."""

from __future__ import annotations

from typing import Any

import pytest

from gpuenv.verify import nodes
from gpuenv.verify.spread import judge

MiB = 1 << 20


def rank(r: int, node: str, *, intra: float | None = None, inter: float | None = None, pairs: Any = ()) -> Any:
    return {
        "rank": r,
        "node": node,
        "nodes": {
            "intra": {"bytes": 64 * MiB, "time": intra} if intra else None,
            "inter": {"bytes": 64 * MiB, "time": inter} if inter else None,
            "pairs": list(pairs),
        },
    }


def test_intra_and_inter_node_busbw_follow_nccl_tests() -> None:
    rank_nodes = ["a", "a", "b", "b"]
    results = [
        rank(0, "a", intra=0.010, inter=0.020),
        rank(1, "a", intra=0.012),
        rank(2, "b", intra=0.010, inter=0.021),
        rank(3, "b", intra=0.010),
    ]
    table = nodes.figures(results, rank_nodes)
    algbw_a = 64 * MiB / 0.012 / 1e9  # the slowest rank of the node decides
    assert table["intra"]["a"]["algbw_gbps"] == pytest.approx(algbw_a, abs=1e-3)
    assert table["intra"]["a"]["busbw_gbps"] == pytest.approx(algbw_a * 2 * 1 / 2, abs=1e-3)
    inter_algbw = 64 * MiB / 0.021 / 1e9
    assert table["inter"]["nodes"] == 2
    assert table["inter"]["busbw_gbps"] == pytest.approx(inter_algbw, abs=1e-3)  # 2(n-1)/n = 1 for two nodes
    assert nodes.node_findings(table) == []  # 0.010 vs 0.012: within 75 %


def test_a_slow_node_is_named_against_the_median() -> None:
    rank_nodes = ["a", "a", "b", "b", "c", "c"]
    results = [rank(r, n, intra=0.040 if n == "b" else 0.010) for r, n in enumerate(rank_nodes)]
    [found] = nodes.node_findings(nodes.figures(results, rank_nodes))
    assert found.code == "allreduce.node-slow" and found.item == "b"
    assert "node b" in found.message


def test_on_cpus_speeds_are_reported_not_judged_but_wrong_elements_are() -> None:
    rank_nodes = ["a", "a", "b", "b", "c", "c"]
    results = [rank(r, n, intra=0.040 if n == "b" else 0.010) for r, n in enumerate(rank_nodes)]
    table = nodes.figures(results, rank_nodes)
    assert table["intra"]["b"]["busbw_gbps"] < table["intra"]["a"]["busbw_gbps"]
    assert nodes.node_findings(table, judge_speed=False) == []
    pairs = [
        {"pair": ["a", "b"], "wrong": 0, "time": 0.01},
        {"pair": ["b", "c"], "wrong": 0, "time": 0.05},  # slow: not judged
        {"pair": ["c", "a"], "wrong": 3, "time": 0.01},  # wrong: judged
    ]
    assert nodes.suspects(pairs) == (["a", "c"], [("c", "a")])


def test_node_pairs_name_the_node_two_wrong_pairs_share_and_leave_slow_pairs_to_the_localisation() -> None:
    pairs = [
        {"pair": ["a", "b"], "wrong": 2, "time": 0.01},  # wrong
        {"pair": ["b", "c"], "wrong": 0, "time": 0.05},  # slow: the localisation's to place
        {"pair": ["c", "a"], "wrong": 3, "time": 0.01},  # wrong
    ]
    assert nodes.suspects(pairs) == (["a"], [("a", "b"), ("c", "a")])
    assert nodes.slow_pairs(pairs) == [("b", "c")]
    one_bad = [{"pair": ["a", "b"], "wrong": 0, "time": 0.01}, {"pair": ["b", "c"], "wrong": 1, "time": 0.01}]
    assert nodes.suspects(one_bad)[0] == ["b", "c"]  # one bad pair: both its nodes
    results = [rank(0, "a", pairs=pairs[:1] + pairs[2:]), rank(1, "b", pairs=pairs[:2]), rank(2, "c", pairs=pairs[1:])]
    [found] = nodes.node_findings(nodes.figures(results, ["a", "b", "c"]))
    assert found.code == "allreduce.node-pair-suspect" and "suspect node a" in found.message


def test_one_node_has_no_inter_node_figure() -> None:
    table = nodes.figures([rank(0, "vm", intra=0.01), rank(1, "vm", intra=0.01)], ["vm", "vm"])
    assert table["inter"] is None and table["intra"]["vm"]["ranks"] == 2


def look(**ranks: dict[str, str | None]) -> dict[int, dict[str, str | None]]:
    base = {"node": None, "beat": None, "step": None, "done": None, "failed": None}
    return {int(k[1:]): {**base, **v} for k, v in ranks.items()}


def test_the_board_names_a_frozen_a_stuck_and_a_missing_rank_but_not_those_that_gave_up() -> None:
    first = look(
        r0={"node": "h1", "beat": "10", "step": "3"},
        r1={"node": "h2", "beat": "7", "step": "3"},  # frozen: no heartbeat between the looks
        r2={"node": "h2", "beat": "5", "step": "1"},  # beats, but stuck behind
        r3={},  # never joined
        r4={"node": "h1", "beat": "3", "step": "3", "failed": "DistBackendError: timed out"},
        r5={"node": "h1", "beat": "9", "step": "4", "done": "1"},
    )
    second = look(
        r0={"node": "h1", "beat": "14", "step": "3"},
        r1={"node": "h2", "beat": "7", "step": "3"},
        r2={"node": "h2", "beat": "9", "step": "1"},
        r3={},
        r4={"node": "h1", "beat": "3", "step": "3", "failed": "DistBackendError: timed out"},
        r5={"node": "h1", "beat": "9", "step": "4", "done": "1"},
    )
    found = judge(first, second, 6)
    assert [(r, node) for r, node, _ in found] == [(1, "h2"), (2, "h2"), (3, "?")]
    assert "stopped answering" in found[0][2] and "stuck at step 1" in found[1][2] and "never joined" in found[2][2]
    [hung] = nodes.hung_finding(found[:1])
    assert hung.code == "allreduce.peer-hung" and hung.item == "h2" and "rank 1 on node h2" in hung.message
