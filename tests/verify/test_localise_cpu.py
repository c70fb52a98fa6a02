"""The localisation across nodes through the CLI with real gloo ranks: four single-rank "nodes", each a
verify process of its own under torchrun's environment (tests/verify/spread_nodes.py).

The slow node and the slow link are the test seam's (GPUENV_TEST_FAULT=allreduce:slow:rankN,
allreduce:slowlink:rankA-rankB); test_localise_netns.py slows a real link between network namespaces
(by rate: this machine's kernel has no sch_netem for a delay). A baseline no CPU meets stands for "the collective is
below its expectation", which sets the search off at quick and standard."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from gpuenv.resources import data_file
from tests.verify.spread_nodes import Node, baseline, run_nodes
from tests.verify.test_faults import marked_env
from tests.verify.test_multinode_cpu import no_leftovers

pytestmark = [pytest.mark.slow, pytest.mark.cpu]
SCHEMA = json.loads(data_file("report.schema.json").read_text())
LOCALISATION_CODES = {
    "allreduce.slow-node",
    "allreduce.slow-node-elsewhere",
    "allreduce.slow-link",
    "allreduce.not-localised",
    "allreduce.nothing-localised",
}


def checked(nodes: list[Node]) -> None:
    """Every node wrote a valid report; the search kept within its level's rounds and seconds."""
    for node in nodes:
        jsonschema.validate(node.report, SCHEMA)
        loc = node.localisation
        if loc["ran"]:
            assert len(loc["rounds"]) - 1 <= loc["budget"]["rounds"] and loc["seconds"] <= loc["budget"]["seconds"]
        assert loc == nodes[0].localisation  # every node took the same steps from the same figures


def groups(node: Node) -> list[list[tuple[str, str]]]:
    """Each round's groups as ("n1+n2", verdict)."""
    return [[("+".join(g["nodes"]), g["verdict"]) for g in r["groups"]] for r in node.localisation["rounds"]]


def test_a_slow_node_among_four_is_named_and_only_it_fails(tmp_path: Path) -> None:
    env, mark = marked_env("allreduce:slow:rank2")  # n3's one rank
    summary = tmp_path / "job.json"
    expect = baseline(tmp_path, ranks=4)
    nodes = run_nodes(tmp_path, 4, "--baseline", str(expect), "--job-summary", str(summary), env=env)
    assert [n.code for n in nodes] == [1 if n.name == "n3" else 0 for n in nodes], [n.stderr[-2000:] for n in nodes]
    checked(nodes)
    loc = nodes[0].localisation
    assert loc["outcome"] == "slow node" and loc["nodes"] == ["n3"] and "under 90% of the 1000 GB/s" in loc["why"]
    assert groups(nodes[0]) == [
        [("n1+n2+n3+n4", "slow")],
        [("n1+n2", "fine"), ("n3+n4", "slow")],
        [("n1+n3", "slow"), ("n2+n4", "fine")],  # n3 and n4 each with a witness from the fine half
    ]
    [slow] = [f for f in nodes[2].allreduce["findings"] if f["code"] == "allreduce.slow-node"]
    assert slow["severity"] == "fail" and slow["action"] == "drain"
    assert slow["message"].startswith("node n3 is the slow node: every group holding it was slow")
    assert nodes[2].allreduce["status"] == "fail" and "slow node n3" in nodes[2].allreduce["summary"]
    for node in (nodes[0], nodes[1], nodes[3]):
        assert node.report["verdict"]["certified"] and node.allreduce["status"] == "pass"
        assert node.codes()["allreduce.slow-node-elsewhere"] == "info"
        assert node.report["multi_node"]["suspect_nodes"] == ["n3"]
    job = json.loads(summary.read_text())
    assert job["localisation"] == loc and job["verdict"]["certified"]  # written by n1, certified
    assert not no_leftovers(mark)


def test_a_slow_link_between_two_nodes_is_named_as_a_link_and_both_are_certified(tmp_path: Path) -> None:
    env, mark = marked_env("allreduce:slowlink:rank1-rank2")  # n2's and n3's ranks
    nodes = run_nodes(tmp_path, 4, "--level", "standard", "--baseline", str(baseline(tmp_path, ranks=4)), env=env)
    assert [n.code for n in nodes] == [0, 0, 0, 0], [n.stderr[-2000:] for n in nodes]
    checked(nodes)
    loc = nodes[0].localisation
    assert loc["outcome"] == "slow link" and loc["nodes"] == ["n2", "n3"] and loc["exceeded"] is None
    assert groups(nodes[0])[-1] == [("n1+n4", "fine"), ("n2+n3", "slow")]  # the third round, standard's last
    for node in nodes:
        assert node.codes()["allreduce.slow-link"] == "info" and node.allreduce["status"] == "pass"
        assert node.report["multi_node"]["suspect_nodes"] == []
    assert not no_leftovers(mark)


def test_a_search_past_its_levels_rounds_stops_and_says_so(tmp_path: Path) -> None:
    env, _ = marked_env("allreduce:slowlink:rank1-rank2")  # the link needs a third round; quick has two
    nodes = run_nodes(tmp_path, 4, "--baseline", str(baseline(tmp_path, ranks=4)), env=env)
    checked(nodes)
    loc = nodes[0].localisation
    assert loc["outcome"] == "not localised" and loc["exceeded"] == "the quick level's 2 rounds were spent"
    for node in nodes:  # the collective is slow and nobody could be named: a warning on every node
        assert node.code == 0 and node.codes()["allreduce.not-localised"] == "warn"
        [warned] = [f for f in node.allreduce["findings"] if f["code"] == "allreduce.not-localised"]
        assert warned["message"].endswith("stopped: the quick level's 2 rounds were spent")


def test_a_healthy_run_is_not_localised_at_standard(tmp_path: Path) -> None:
    met = baseline(tmp_path, ranks=4, gbps=0.001)  # an expectation every CPU meets
    nodes = run_nodes(tmp_path, 4, "--level", "standard", "--baseline", str(met), env={})
    assert [n.code for n in nodes] == [0, 0, 0, 0], [n.stderr[-2000:] for n in nodes]
    checked(nodes)
    assert (
        nodes[0].localisation["ran"] is False and nodes[0].localisation["why"] == "the collective met its expectation"
    )
    assert not any(LOCALISATION_CODES & set(n.codes()) for n in nodes)


def test_a_healthy_run_at_deep_localises_and_names_nothing(tmp_path: Path) -> None:
    nodes = run_nodes(tmp_path, 4, "--level", "deep", env={})
    assert [n.code for n in nodes] == [0, 0, 0, 0], [n.stderr[-2000:] for n in nodes]
    checked(nodes)
    loc = nodes[0].localisation
    assert loc["ran"] and loc["why"] == "the deep level localises always" and loc["outcome"] == "nothing slow"
    assert groups(nodes[0]) == [[("n1+n2+n3+n4", "fine")], [("n1+n2", "fine"), ("n3+n4", "fine")]]
    for node in nodes:
        assert (
            node.codes()["allreduce.nothing-localised"] == "info" and node.report["multi_node"]["suspect_nodes"] == []
        )


def test_a_hung_node_is_named_as_before(tmp_path: Path) -> None:
    env, mark = marked_env("allreduce:stop:rank3")  # n4's rank freezes after joining, before any collective
    nodes = run_nodes(tmp_path, 4, "--timeout", "20", env=env)
    for node in nodes:
        assert node.code == 1 and node.allreduce["status"] == "timeout", node.stderr[-2000:]
        hung = node.report["multi_node"]["hung"]
        assert [(h["rank"], h["node"]) for h in hung] == [(3, "n4")]
        assert [f["code"] for f in node.allreduce["findings"]] == ["allreduce.peer-hung"]
        assert "localisation" not in node.report["multi_node"]
    assert not no_leftovers(mark)
