"""The fleet report shows each run's localisation across nodes once, in its JSON and on its HTML page:
the job, the hosts that reported it, what it named, and every round's groups with their busbw."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import jsonschema

from gpuenv import output
from gpuenv.fleet.report import ReportRequest, fleet_report
from gpuenv.fleet.report_reading import read_report
from gpuenv.resources import data_file
from gpuenv.verify.checks.allreduce.localise import rounds_table
from gpuenv.verify.checks.allreduce.search import Search
from tests.fleet import fleet_reports as fr
from tests.fleet.test_html import needs_matplotlib

SCHEMA = json.loads(data_file("schemas/fleet-report.schema.json").read_text())


def localised(names: list[str], slow: int) -> dict[str, Any]:
    """A localisation as the ranks return it: the search run over the seam's model of a slow node."""
    search = Search([[i] for i in range(len(names))], 0.5)
    for number, (label, groups) in enumerate(search.rounds()):
        search.record(
            number,
            label,
            [(g, 0.3 if slow in g.nodes else 0.01, 1 / (0.3 if slow in g.nodes else 0.01)) for g in groups],
        )
    outcome = search.outcome()
    return {
        "ran": True, "why": "the deep level localises always", "budget": {"rounds": 10, "seconds": 180.0},
        "setup_s": 0.05, "seconds": 1.9, "exceeded": None, "rounds": rounds_table(search, names),
        "outcome": outcome.kind, "nodes": [names[n] for n in outcome.nodes],
    }  # fmt: skip


def write_run(folder: Path, nodes: list[fr.Node], job: str, loc: dict[str, Any]) -> None:
    for node in nodes:
        doc = fr.report(node)
        doc["multi_node"] = {"launcher": "srun", "job": job, "node": node.host, "localisation": loc}
        (folder / f"{node.host}.json").write_text(json.dumps(doc))


def test_each_runs_localisation_is_shown_once_with_its_rounds(tmp_path: Path) -> None:
    nodes = fr.fleet(6, seed=3)
    names = [n.host for n in nodes[:4]]
    loc = localised(names, slow=2)
    assert loc["outcome"] == "slow node" and loc["nodes"] == [names[2]]
    write_run(tmp_path, nodes[:4], "4711.0", loc)
    write_run(tmp_path, nodes[4:], "4712.0", {"ran": False, "why": "the collective met its expectation"})
    report = fleet_report(ReportRequest((tmp_path,)))
    data = json.loads(output.text("fleet", "json", report))
    jsonschema.validate(data, SCHEMA)
    [run] = data["localisations"]  # the run that did not search shows no rounds
    assert run["job"] == "4711.0" and sorted(run["hosts"]) == names and run["outcome"] == "slow node"
    assert [[g["verdict"] for g in r["groups"]] for r in run["rounds"]] == [
        ["slow"],
        ["fine", "slow"],
        ["slow", "fine"],
    ]
    host = read_report(tmp_path / f"{names[0]}.json")
    assert pickle.loads(pickle.dumps(host)) == host  # reader processes hand hosts back pickled


def test_the_page_has_a_table_of_the_rounds(tmp_path: Path) -> None:
    needs_matplotlib()
    nodes = fr.fleet(4, seed=5)
    names = [n.host for n in nodes]
    write_run(tmp_path, nodes, "4713.0", localised(names, slow=1))
    page = output.text("fleet", "html", fleet_report(ReportRequest((tmp_path,))))
    assert "<h2>Localisation across nodes</h2>" in page
    assert f"job 4713.0: slow node {names[1]} after 2 round(s) (the deep level localises always)" in page
    witnessed = f"<td>2</td><td>halves</td><td>{names[1]}+{names[3]}</td><td>{names[3]}</td><td>2</td><td>3.33</td>"
    assert witnessed + "<td>slow</td>" in page  # the suspect with a node from the fine half
