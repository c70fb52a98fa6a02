"""The localisation's search and verdicts, pure: swept over every slow node and every slow link of
two to nine nodes (one or two ranks each), a healthy fleet with the scheduler's noise, the budget's
rounds, and what each node's report says of the outcome."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from gpuenv.verify import faults
from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.catalogue import finding
from gpuenv.verify.checks.allreduce import blame, localise
from gpuenv.verify.checks.allreduce.judging import Judge
from gpuenv.verify.checks.allreduce.search import Search, across, round_robin

HEALTHY_S, DELAY_S = 0.01, faults.SLOW_S


def simulate(
    count: int,
    per_node: int,
    *,
    slow: int | None = None,
    link: tuple[int, int] | None = None,
    below: bool = False,
    rounds: int = localise.BUDGETS["deep"].rounds,
    noise: random.Random | None = None,
) -> tuple[Search, list[list[tuple[int, ...]]]]:
    """The search over `count` nodes, each group's time the seam's model: a healthy time (times up to
    2x noise), plus the delay when it holds the slow node or both ends of the slow link."""
    search = Search([list(range(n * per_node, (n + 1) * per_node)) for n in range(count)], 0.25, whole_below=below)
    reachable = {g.ranks for g in search.reachable(rounds)}
    seen: list[list[tuple[int, ...]]] = []
    for number, (label, groups) in enumerate(search.rounds()):
        if number > rounds:
            break
        figures = []
        for g in groups:
            assert g.kind == "whole" or g.ranks in reachable, f"{g} was not created before the run"
            seconds = HEALTHY_S * (noise.uniform(1, 2) if noise else 1)
            seconds += DELAY_S if slow in g.nodes or (link and set(link) <= set(g.nodes)) else 0
            figures.append((g, seconds, 1 / seconds))
        search.record(number, label, figures)
        seen.append([g.nodes for g in groups])
    return search, seen


@pytest.mark.parametrize(("count", "per_node"), [(n, r) for n in range(3, 10) for r in (1, 2)] + [(2, 2)])
def test_every_slow_node_and_every_slow_link_is_named(count: int, per_node: int) -> None:
    for node in range(count):
        search, _ = simulate(count, per_node, slow=node)
        assert (search.outcome().kind, search.outcome().nodes) == ("slow node", (node,))
    for link in itertools.combinations(range(count), 2):
        search, _ = simulate(count, per_node, link=link, below=True)
        assert (search.outcome().kind, search.outcome().nodes) == ("slow link", link)


@pytest.mark.parametrize("count", range(2, 10))
def test_a_healthy_fleet_names_nothing_through_the_schedulers_noise(count: int) -> None:
    noise = random.Random(count)
    for _ in range(20):
        search, rounds = simulate(count, 1, noise=noise)
        assert search.outcome().kind == "nothing slow"
        assert len(rounds) <= (4 if count == 3 else 2)  # the whole and its halves (three nodes: their pairs)


def test_slow_groups_lie_below_a_wide_step_and_a_fluke_among_healthy_groups_moves_nothing() -> None:
    search = Search([[n] for n in range(8)], 0.25)
    pairs = itertools.combinations(range(8), 2)
    healthy = [0.37, 0.32, 0.25, 0.22, 0.41, 0.19, 0.22, 0.56]  # a 2-core machine's spread, measured
    flukes = [1.5, 0.09]  # one group far faster than the rest, one twice slower than the slowest
    search.record(1, "pairs", [(search.group(p), 0.01, b) for p, b in zip(pairs, healthy + flukes, strict=False)])
    assert {search.verdict(m) for m in search.measured} == {"fine"}
    search.record(2, "pairs", [(search.group((2, 5)), 0.3, 0.0137)])  # the seam's slow link: 7x below the fluke
    assert [m.group.nodes for m in search.measured if search.verdict(m) == "slow"] == [(2, 5)]


def test_four_nodes_take_two_rounds_for_a_node_and_three_for_a_link_within_standards_budget() -> None:
    _, rounds = simulate(4, 1, slow=2)
    assert rounds == [[(0, 1, 2, 3)], [(0, 1), (2, 3)], [(0, 2), (1, 3)]]  # n3 and n4 each with a witness
    search, rounds = simulate(4, 1, link=(1, 2), below=True, rounds=localise.BUDGETS["standard"].rounds)
    assert rounds == [[(0, 1, 2, 3)], [(0, 1), (2, 3)], [(0, 2), (1, 3)], [(0, 3), (1, 2)]]
    assert search.outcome().kind == "slow link"
    search, rounds = simulate(4, 1, link=(1, 2), below=True, rounds=localise.BUDGETS["quick"].rounds)
    assert len(rounds) == 3 and search.outcome().kind == "not localised"  # quick stops a round short


def test_what_cannot_be_told_apart_is_not_localised() -> None:
    search, _ = simulate(2, 1, slow=1, below=True)  # two single-rank nodes: the whole is the only group
    assert search.outcome().kind == "not localised" and search.outcome().nodes == (0, 1)
    search, rounds = simulate(2, 2, link=(0, 1), below=True)  # each alone fine, together slow: their link
    assert search.outcome().kind == "slow link" and len(rounds) == 2
    shared = Search([[0], [1], [2], [3]], 0.25, whole_below=True)  # under its expectation, every group alike:
    for number, (label, groups) in enumerate(shared.rounds()):  # a switch, the fabric, a setting
        shared.record(number, label, [(g, 1.0, 1.0) for g in groups])
    assert shared.outcome().kind == "not localised" and shared.outcome().nodes == ()
    assert [m.label for m in shared.measured] == ["whole", "halves", "halves", "pairs", "pairs", "pairs", "pairs"]


def test_the_schedules_pair_every_node_once_in_disjoint_rounds() -> None:
    for count in range(2, 9):
        rounds = list(round_robin(range(count)))
        pairs = [p for r in rounds for p in r]
        assert sorted(pairs) == list(itertools.combinations(range(count), 2))
        assert all(len({n for p in r for n in p}) == 2 * len(r) for r in rounds)
    halves = list(across([0, 1, 2], [3, 4, 5, 6]))
    assert len(halves) == 4 and sorted(p for r in halves for p in r) == [
        (a, b) for a in (0, 1, 2) for b in (3, 4, 5, 6)
    ]


def test_the_groups_made_before_the_run_grow_with_the_levels_rounds() -> None:
    four, eight = Search([[0], [1], [2], [3]], 0.25), Search([[n] for n in range(8)], 0.25)
    assert [len(four.reachable(r)) for r in (2, 3)] == [4, 6]
    assert [len(eight.reachable(r)) for r in (2, 3, localise.BUDGETS["deep"].rounds)] == [10, 18, 30]


# the ranks' plan and what stops them from searching


def test_the_plan_carries_the_levels_budget_and_a_search_that_nothing_can_set_off_is_not_prepared() -> None:
    plan = localise.plan(level="standard", device="cpu", limit_s=300, expected=None, judge_pairs=False)
    assert (plan["rounds"], plan["seconds"], plan["bytes"], plan["share"]) == (3, 75.0, 4 << 20, 0.25)
    quick = localise.plan(level="quick", device="cpu", limit_s=90, expected=None, judge_pairs=False)
    why = localise.prepare({"localise": quick, "rank_nodes": ["a", "b"]})
    assert isinstance(why, str) and why.startswith("at quick only when the collective is below its expectation")
    assert localise.prepare({"localise": quick, "rank_nodes": ["a", "a"]}) == "one node: nothing crosses nodes"


def test_the_whole_is_below_its_expectation_as_the_judge_would_say() -> None:
    expected = {"gbps": 10.0, "below": 0.9, "source": "baseline b.json"}
    heads = [{"head": 0.004}, {"head": 0.008}]  # 4 MiB; the slower rank: 0.52 GB/s busbw over 2 ranks
    assert localise._below(expected, heads, 4 << 20, 2) == (
        "the collective's busbw 0.524 GB/s is under 90% of the 10 GB/s expected (baseline b.json)"
    )
    assert localise._below({**expected, "gbps": 0.5}, heads, 4 << 20, 2) is None
    assert localise._below(expected, [{"head": 0.004}, {"head": None}], 4 << 20, 2) is None  # a rank skipped it


def test_a_cpu_baseline_row_is_the_expectation_the_search_compares_with(tmp_path: Any) -> None:
    path = tmp_path / "b.json"
    path.write_text(
        '{"schema": "gpuenv.baselines/2", "fail_below": 0.75, "warn_below": 0.9, "matmul_tflops": [],'
        ' "busbw": [{"match": ["cpu"], "gpus": 4, "collective": "allreduce", "min_bytes": 1, "busbw_gbps": 2}]}'
    )
    judge = Judge(world=4, device="cpu", gpu_name="cpu", baselines=load_baselines(path), expectations=None)
    assert judge.expected(64 << 20) == {"gbps": 2.0, "below": 0.9, "source": f"baseline {path}"}
    assert (
        Judge(world=2, device="cpu", gpu_name="cpu", baselines=load_baselines(path), expectations=None).expected(
            64 << 20
        )
        is None
    )


# each node's verdict


def localisation(outcome: str, nodes: list[str], **more: Any) -> dict[str, Any]:
    group = {"nodes": ["n1", "n2"], "witnesses": [], "ranks": 2, "time_us": 10.0, "busbw_gbps": 1.0, "verdict": "fine"}
    slow = {**group, "nodes": ["n3", "n4"], "busbw_gbps": 0.01, "verdict": "slow"}
    rounds = [{"round": 0, "label": "whole", "groups": [{**slow, "nodes": ["n1", "n2", "n3", "n4"]}]}]
    rounds.append({"round": 1, "label": "halves", "groups": [group, slow]})
    return {"ran": True, "why": "the deep level localises always", "outcome": outcome, "nodes": nodes,
            "rounds": rounds, "seconds": 1.5, "setup_s": 0.1, "exceeded": None, **more}  # fmt: skip


INTRA = {"n1": {"busbw_gbps": 1.0}, "n2": {"busbw_gbps": 1.1}, "n3": {"busbw_gbps": 0.2}, "n4": {"busbw_gbps": 1.0}}


def codes(found: list[Any]) -> list[tuple[str | None, str]]:
    return [(f.code, f.severity) for f in found]


def test_the_slow_node_fails_and_every_other_node_is_certified_with_a_note() -> None:
    loc = localisation("slow node", ["n3"])
    [mine] = blame.findings(loc, me="n3", intra=INTRA)
    assert (mine.code, mine.severity, mine.item) == ("allreduce.slow-node", "fail", "n3")
    assert "its own ranks are slow among themselves too (intra-node busbw 0.2 GB/s" in mine.message
    [note] = blame.findings(loc, me="n1", intra=INTRA)
    assert (note.code, note.severity) == ("allreduce.slow-node-elsewhere", "info")
    assert note.message.startswith("node n3 slows the collective across nodes (the deep level localises always)")
    assert "halves n1+n2 1, n3+n4 0.01 slow" in note.message
    low = finding("allreduce.busbw-low", "allreduce 512 MiB busbw 10 GB/s vs 50 recorded")
    kept = finding("allreduce.wrong-result", "rank 3 got 1 wrong element")
    assert blame.cleared([low, kept], loc, me="n1") == [kept]  # the whole's slowness is n3's, not n1's
    assert blame.cleared([low, kept], loc, me="n3") == [low, kept]
    assert blame.summary(loc) == "; localised in 1 round (+1.6 s): slow node n3"


def test_a_slow_link_is_a_note_on_every_node_and_clears_the_wholes_slowness() -> None:
    loc = localisation("slow link", ["n2", "n3"])
    low = finding("allreduce.busbw-under-model", "allreduce 512 MiB busbw 300 GB/s, 80% of ...")
    for me in ("n1", "n2", "n3", "n4"):
        assert codes(blame.findings(loc, me=me, intra=INTRA)) == [("allreduce.slow-link", "info")]
        assert blame.cleared([low], loc, me=me) == []


def test_nothing_named_leaves_the_findings_and_says_what_was_seen() -> None:
    low = finding("allreduce.busbw-low", "slow")
    stopped = localisation("not localised", ["n3", "n4"], exceeded="the quick level's 2 rounds were spent")
    [warned] = blame.findings(stopped, me="n1", intra=INTRA)
    assert (warned.code, warned.severity) == ("allreduce.not-localised", "warn")
    assert "(still under suspicion: n3, n4)" in warned.message
    assert warned.message.endswith("stopped: the quick level's 2 rounds were spent")
    assert blame.cleared([low], stopped, me="n1") == [low]
    assert codes(blame.findings(localisation("nothing slow", []), me="n1", intra=INTRA)) == [
        ("allreduce.nothing-localised", "info")
    ]
    not_run = {"ran": False, "why": "the collective met its expectation"}
    assert blame.findings(not_run, me="n1", intra=INTRA) == [] and blame.cleared([low], not_run, me="n1") == [low]
    assert blame.summary(not_run) == ""


def test_the_named_nodes_own_figures_point_at_its_gpus_or_its_network() -> None:
    assert "look at its NIC, cable and switch port" in blame.where("n1", INTRA)
    assert "look at its GPUs" in blame.where("n3", INTRA)
    assert blame.where("n9", INTRA).startswith("one rank on the node")
    assert "no other node's figure" in blame.where("n1", {"n1": {"busbw_gbps": 1.0}})


# the test seam


def test_the_slow_faults_parse_name_their_ranks_and_are_inert_unless_set() -> None:
    env = {faults.ENV: "allreduce:slow:rank2,allreduce:slowlink:rank5-rank1"}
    assert faults.slowdown("allreduce", 2, env=env) == {"seconds": faults.SLOW_S, "peer": None}
    assert faults.slowdown("allreduce", 1, env=env) == {"seconds": faults.SLOW_S, "peer": 5}  # the lower end waits
    assert faults.slowdown("allreduce", 5, env=env) is None and faults.slowdown("allreduce", 0, env=env) is None
    assert faults.slowdown("allreduce", 2, env={}) is None
    assert faults.active("allreduce", rank=2, env=env) == "slow"


@pytest.mark.parametrize(
    "bad", ["allreduce:slow", "allreduce:slowlink:rank1", "allreduce:slowlink:rank1-rank1", "allreduce:slowlink:1-2"]
)
def test_the_slow_faults_refuse_what_names_no_rank_or_link(bad: str) -> None:
    with pytest.raises(ValueError, match="bad GPUENV_TEST_FAULT entry"):
        faults.parse(bad)
