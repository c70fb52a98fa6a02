"""A site check's figures in the fleet: declared with their unit and direction in each report,
compared across hosts by `fleet report` (outliers) and learned by `fleet baseline learn`, over
generated reports whose site check results gpuenv's own reader of answers made."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from gpuenv.verify.facts import GpuInfo
from gpuenv.verify.site.answers import from_answer
from tests.conftest import gpuenv_main
from tests.fleet import fleet_reports as fr


def site_result(node: fr.Node, rng: random.Random, *, port: dict[int, float], latency: float) -> dict[str, Any]:
    """The site check `ib` as the engine reports it: a per-GPU and a per-node figure."""
    gpus = tuple(GpuInfo(i, i, node.model, node.uuid(i)) for i in range(node.gpus))
    answer = {
        "status": "pass",
        "metrics": {
            "port_gbps": {"value": {str(i): port.get(i, round(rng.gauss(390, 2), 2)) for i in range(node.gpus)},
                          "unit": "Gb/s", "better": "higher"},
            "latency_us": {"value": latency, "unit": "us", "better": "lower"},
        },
    }  # fmt: skip
    return from_answer("site.ib", "program /etc/gpuenv/checks.d/ib", answer, gpus).to_dict()


def write_fleet(folder: Path, planted: dict[str, dict[str, Any]], n: int = 24) -> Path:
    rng = random.Random(3)
    folder.mkdir()
    for node in fr.fleet(n, seed=8):
        report = fr.report(node)
        plant = planted.get(node.host, {})
        latency = plant.get("latency", round(rng.gauss(2.0, 0.02), 3))
        report["checks"].append(site_result(node, rng, port=plant.get("port", {}), latency=latency))
        (folder / f"{node.host}.json").write_text(json.dumps(report))
    return folder


PLANTED = {
    "gpu0003": {"port": {5: 200.0}},  # one port trained down: an outlier
    "gpu0007": {"latency": 9.5},  # slow fabric: an outlier (lower is better)
    "gpu0009": {"latency": 0.5, "port": {0: 600.0}},  # better than the rest: never an outlier
}


def test_a_site_checks_figures_are_judged_for_outliers_like_gpuenvs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_fleet(tmp_path / "reports", PLANTED)
    assert gpuenv_main("fleet", "report", "--no-history", "--json", str(folder)) == 1
    data = json.loads(capsys.readouterr().out)
    site = [o for o in data["outliers"] if o["metric"].startswith("site.")]
    found = {(o["host"], o["metric"], o["gpu_index"], o["unit"]) for o in site}
    assert found == {
        ("gpu0003", "site.ib.port_gbps", 5, "Gb/s"),
        ("gpu0007", "site.ib.latency_us", None, "us"),
    }
    port = next(o for o in site if o["host"] == "gpu0003")
    assert port["gpu_uuid"] == "GPU-gpu0003-5"  # the CUDA index the report keys it by names the GPU
    groups = {g["metric"]: g for g in data["groups"]}
    assert groups["site.ib.latency_us"]["better"] == "lower" and groups["site.ib.latency_us"]["judged"]
    assert gpuenv_main("fleet", "report", "--no-history", str(folder)) == 1
    assert "site.ib.port_gbps" in capsys.readouterr().out


def test_hosts_that_declare_a_figure_differently_are_described_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_fleet(tmp_path / "reports", PLANTED)
    odd = json.loads((folder / "gpu0001.json").read_text())
    odd["checks"][-1]["figures"]["latency_us"] = {"unit": "ms", "better": "lower", "per_gpu": False}
    (folder / "gpu0001.json").write_text(json.dumps(odd))
    gpuenv_main("fleet", "report", "--no-history", "--json", str(folder))
    data = json.loads(capsys.readouterr().out)
    latency = next(g for g in data["groups"] if g["metric"] == "site.ib.latency_us")
    assert not latency["judged"] and "hosts declare it differently (ms, lower is better; us" in latency["note"]
    assert not [o for o in data["outliers"] if o["metric"] == "site.ib.latency_us"]


def test_fleet_baseline_learn_learns_a_site_checks_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_fleet(tmp_path / "reports", PLANTED)
    out = tmp_path / "baselines.json"
    assert gpuenv_main("fleet", "baseline", "learn", str(folder), "-o", str(out)) == 0, capsys.readouterr().err
    rows = {r["figure"]: r for r in json.loads(out.read_text())["figures"]}
    assert rows["site.ib.latency_us"]["value"] == pytest.approx(2.0, rel=0.05)
    assert rows["site.ib.port_gbps"]["value"] == pytest.approx(390, rel=0.02)
