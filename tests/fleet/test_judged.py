"""fleet report fails closed: a group too small to judge by its median is judged against its GPU
model's expected figures (gpu-expectations.json, the floors verify judges a node by); a group with
neither is "not judged", said in the verdict and the JSON, and the fleet is never called healthy.

Through the CLI over generated reports: four H100 (or MI300X) hosts, one slow; warn, fail and the
healthy control; a model with no expected figure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpuenv.fleet.collect import HostOutcome, fleet_report_of
from gpuenv.fleet.report_reading import entry_of
from gpuenv.output import fleet as formats
from gpuenv.resources import data_file
from gpuenv.verify import reportfile
from tests.conftest import gpuenv_main, run_gpuenv
from tests.fleet import amd_reports as ar
from tests.fleet import fleet_reports as fr

SCHEMA = json.loads(data_file("schemas/fleet-report.schema.json").read_text())
H100_TFLOPS = 780.0  # 98 % of the 794.5 TFLOP/s gpu-expectations.json gives a healthy H100 SXM
LARGE = (("allreduce", 512 * fr.MiB), ("allreduce", 1024 * fr.MiB))  # the sizes an expected busbw is for


def slowed(node: fr.Node, share: float) -> fr.Node:
    """The node at `share` of its matmul TFLOP/s and busbw."""
    node.tflops = {i: v * share for i, v in node.tflops.items()}
    node.busbw = {k: v * share for k, v in node.busbw.items()}
    return node


def h100s(slow: float | None = None) -> list[fr.Node]:
    """Four H100 hosts, the last at `slow` of the others' figures."""
    nodes = fr.fleet(4, tflops=H100_TFLOPS)
    if slow is not None:
        slowed(nodes[3], slow)
    return nodes


def mi300xs(slow: float | None = None) -> list[fr.Node]:
    nodes = ar.mi300x_fleet(4)
    if slow is not None:
        slowed(nodes[3], slow)
    return nodes


def amp_and_allreduce(node: fr.Node, *, amd: bool = False) -> dict[str, Any]:
    """The node's report of `verify --check amp --check allreduce` (no NVML read, so no energy figure),
    the allreduce at large sizes: every figure in it has an expected value for a known model."""
    node.busbw = {size: node.busbw[fr.SIZES[1]] for size in LARGE}
    doc = ar.report(node) if amd else fr.report(node)
    doc["checks"] = [c for c in doc["checks"] if c["name"] != "nvml"]
    amp = next(c for c in doc["checks"] if c["name"] == "amp")
    del amp["metrics"]["energy_per_step_j"]
    return doc


def write(folder: Path, nodes: list[fr.Node], *, only_judged: bool = False, amd: bool = False) -> Path:
    folder.mkdir(parents=True)
    for node in nodes:
        doc = amp_and_allreduce(node, amd=amd) if only_judged else ar.report(node) if amd else fr.report(node)
        (folder / f"{node.host}.json").write_text(json.dumps(doc))
    return folder


def report(capsys: pytest.CaptureFixture[str], folder: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    code = gpuenv_main("fleet", "report", "--no-history", "--json", str(folder), *args)
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, SCHEMA)
    return code, data, formats.outcome_line(_result(folder, *args))


def _result(folder: Path, *args: str) -> Any:
    from gpuenv.fleet.report import ReportRequest, fleet_report

    return fleet_report(ReportRequest((folder,), strict="--strict" in args))


def below(data: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (b["host"], f"{b['metric']} {b['collective'] or ''}".strip(), b["severity"]) for b in data["below_expected"]
    }


# --- NVIDIA: four H100 hosts ----------------------------------------------------------------------


def test_four_h100_hosts_with_one_at_30_percent_name_it_and_exit_1(tmp_path: Path) -> None:
    """The reports as verify writes them: the slow host is under the H100's expected matmul and
    busbw, named, and the report exits 1; the groups no figure covers are said to be unjudged."""
    folder = write(tmp_path / "r", h100s(slow=0.3))
    result = run_gpuenv("fleet", "report", "--no-history", str(folder))
    assert result.returncode == 1, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert "1 host(s) under the expected figures" in last and last.endswith("fleet NOT healthy"), last
    assert "group(s) not judged" in last
    assert "gpu0003" in result.stdout and "H100 SXM" in result.stdout
    data = json.loads(run_gpuenv("fleet", "report", "--no-history", "--json", str(folder)).stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["healthy"] is False and data["judged"] is False
    assert below(data) == {
        ("gpu0003", "amp.matmul_tflops", "fail"),
        ("gpu0003", "allreduce.busbw_gbps allreduce", "fail"),
    }
    assert {b["gpu_index"] for b in data["below_expected"] if b["metric"] == "amp.matmul_tflops"} == set(range(8))
    assert data["attention"][0]["host"] == "gpu0003"
    assert {p["kind"] for p in data["attention"][0]["problems"]} == {"expected"}


def test_a_host_under_the_warn_share_warns_exit_0_and_1_with_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write(tmp_path / "r", h100s(slow=0.8), only_judged=True)  # 0.8 x 780 = 79 % of 794.5
    code, data, line = report(capsys, folder)
    assert code == 0 and data["healthy"] is True and data["judged"] is True
    assert below(data) == {
        ("gpu0003", "amp.matmul_tflops", "warn"),
        ("gpu0003", "allreduce.busbw_gbps allreduce", "warn"),
    }
    assert line.endswith("fleet healthy (with warnings)"), line
    code, data, _ = report(capsys, folder, "--strict")
    assert code == 1 and data["rule"]["strict"] is True


def test_the_healthy_control_is_judged_and_healthy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write(tmp_path / "r", h100s(), only_judged=True)
    code, data, line = report(capsys, folder, "--strict")
    assert code == 0 and data["healthy"] is True and data["judged"] is True and data["not_judged"] is None
    assert data["below_expected"] == [] and data["outliers"] == []
    assert {g["judged_against"] for g in data["groups"]} == {"expected"}
    assert {g["expected"]["model"] for g in data["groups"]} == {"H100 SXM"}
    assert line == "4 host(s): 4 certified; 0 outlier(s): fleet healthy"


# --- AMD: four MI300X hosts -----------------------------------------------------------------------


def test_four_mi300x_hosts_with_one_slow_fail_on_the_confirmed_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """MI300X's matmul figure is measured (fails under 70 %); its xGMI busbw is an estimate, which
    only ever warns."""
    code, data, line = report(capsys, write(tmp_path / "r", mi300xs(slow=0.3), only_judged=True, amd=True))
    assert code == 1 and data["healthy"] is False and line.endswith("fleet NOT healthy")
    assert below(data) == {
        ("mi300x-0003", "amp.matmul_tflops", "fail"),
        ("mi300x-0003", "allreduce.busbw_gbps allreduce", "warn"),
    }
    busbw = next(b for b in data["below_expected"] if b["metric"] == "allreduce.busbw_gbps")
    assert busbw["model"] == "MI300X" and busbw["confirmed"] is False and busbw["share"] < 0.7
    assert "amd-smi" in data["attention"][0]["problems"][0]["todo"]


def test_mi300x_warn_and_healthy_control(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data, _ = report(capsys, write(tmp_path / "warn", mi300xs(slow=0.8), only_judged=True, amd=True))
    assert code == 0 and data["healthy"] is True
    assert below(data) == {
        ("mi300x-0003", "amp.matmul_tflops", "warn"),
        ("mi300x-0003", "allreduce.busbw_gbps allreduce", "warn"),
    }
    code, data, line = report(capsys, write(tmp_path / "ok", mi300xs(), only_judged=True, amd=True), "--strict")
    assert code == 0 and data["healthy"] is True and data["below_expected"] == []
    assert line.endswith("fleet healthy")


# --- not judged -----------------------------------------------------------------------------------


def test_a_group_with_neither_hosts_nor_an_expectation_is_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four hosts of a GPU model gpu-expectations.json does not know, one of them at 30 %: nothing
    judges them, and the report says so; never "fleet healthy"."""
    nodes = fr.fleet(4, model="NVIDIA RTX A6000")
    slowed(nodes[3], 0.3)
    folder = write(tmp_path / "r", nodes, only_judged=True)
    code, data, line = report(capsys, folder)
    assert code == 0 and data["healthy"] is None and data["judged"] is False
    assert "3 group(s) with values from fewer than 8 hosts and no expected figure" in data["not_judged"]
    assert all(g["judged"] is False and g["judged_against"] is None for g in data["groups"])
    assert line.endswith("3 group(s) not judged (under 8 hosts, no expected figure): fleet not judged"), line
    assert gpuenv_main("fleet", "report", "--no-history", "--strict", str(folder)) == 1
    shown = capsys.readouterr().out
    assert "fleet healthy" not in shown and "not judged: 3 group(s)" in shown
    assert gpuenv_main("fleet", "report", "--no-history", "--markdown", str(folder)) == 0
    markdown = capsys.readouterr().out
    assert "## Not judged" in markdown and "fleet healthy" not in markdown
    prom = tmp_path / "fleet.prom"
    assert gpuenv_main("fleet", "report", "--no-history", "--prometheus", str(prom), str(folder)) == 0
    assert "gpuenv_fleet_healthy 0\n" in prom.read_text() and "gpuenv_fleet_judged 0\n" in prom.read_text()


def test_a_fleet_with_any_group_unjudged_is_never_called_healthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reports as verify writes them hold temperatures and clocks, which no expected figure
    covers: four healthy H100 hosts are not judged, not healthy."""
    code, data, line = report(capsys, write(tmp_path / "r", h100s()))
    assert code == 0 and data["healthy"] is None and data["below_expected"] == []
    assert line.endswith(": fleet not judged") and "fleet healthy" not in line
    judged = {g["metric"]: g["judged_against"] for g in data["groups"] if g["collective"] != "allgather"}
    assert judged["amp.matmul_tflops"] == "expected" and judged["nvml.temperature_c"] is None


def test_fleet_verifys_summary_uses_the_same_words(tmp_path: Path) -> None:
    """What fleet verify shows of the reports its hosts sent back (the run itself is Ansible's)."""
    folder = write(tmp_path / "r", h100s(slow=0.3))
    outcomes = tuple(HostOutcome(p.stem, "certified", str(p), None) for p in sorted(folder.glob("*.json")))
    fleet = fleet_report_of(outcomes, {h.host: entry_of(reportfile.read(str(h.report))) for h in outcomes}, None)
    assert formats.outcome_line(fleet).endswith("fleet NOT healthy")
    assert [(b.host, b.severity) for b in fleet.below_expected][:1] == [("gpu0003", "fail")]
    healthy = tuple(h for h in outcomes if h.host != "gpu0003")
    fleet = fleet_report_of(healthy, {h.host: entry_of(reportfile.read(str(h.report))) for h in healthy}, None)
    assert fleet.healthy is None and formats.outcome_line(fleet).endswith("fleet not judged")
