"""Fleet groups are keyed by (GPU model, CPU architecture): Arm nodes of a model are not x86 nodes' peers."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpuenv.fleet import stats
from gpuenv.fleet.baseline import LearnRequest, checked_text, learn_baselines
from gpuenv.fleet.report import ReportRequest, fleet_report
from gpuenv.fleet.report_compare import compare
from gpuenv.fleet.report_model import HostReport, _group_dict
from gpuenv.fleet.report_reading import host_report
from gpuenv.output.fleet import to_prometheus
from gpuenv.resources import data_file
from gpuenv.verify.baselines import load_baselines
from tests.fleet import fleet_reports as fr
from tests.fleet.test_baseline import BASELINES_SCHEMA
from tests.fleet.test_report import SCHEMA


def _hosts(nodes: list[fr.Node], cpu_arch: str | None) -> list[HostReport]:
    out = []
    for node in nodes:
        doc: dict[str, Any] = fr.report(node)
        if cpu_arch is not None:
            doc["host"]["cpu_arch"] = cpu_arch
        out.append(host_report(fr.typed(doc), f"{node.host}.json"))
    return out


def test_the_same_gpu_on_two_architectures_makes_two_groups() -> None:
    x86 = _hosts(fr.fleet(10, seed=7, prefix="x86"), "x86_64")
    arm_nodes = fr.fleet(10, seed=8, prefix="arm")
    for node in arm_nodes:  # a faster figure that is normal for its own architecture, not an outlier beside x86
        node.tflops = {i: v * 1.15 for i, v in node.tflops.items()}
    groups, outliers = compare(x86 + _hosts(arm_nodes, "aarch64"), stats.Rule(), stats.MIN_JUDGED)
    assert outliers == []
    assert {g.key.cpu_arch for g in groups} == {"x86_64", "aarch64"}
    assert any(g.key.label().startswith("8x NVIDIA H100 80GB HBM3 (aarch64) ") for g in groups)


def test_mixing_the_architectures_in_one_group_would_have_flagged_them() -> None:
    arm_nodes = fr.fleet(3, seed=8, prefix="arm")
    for node in arm_nodes:
        node.tflops = {i: v * 0.8 for i, v in node.tflops.items()}
    nodes = fr.fleet(10, seed=7, prefix="x86")
    _, outliers = compare(_hosts(nodes, None) + _hosts(arm_nodes, None), stats.Rule(), stats.MIN_JUDGED)
    assert outliers  # the control: one group, the slower hosts stand out
    _, apart = compare(_hosts(nodes, "x86_64") + _hosts(arm_nodes, "aarch64"), stats.Rule(), stats.MIN_JUDGED)
    assert not [o for o in apart if o.host.startswith("arm")]


def test_reports_without_the_architecture_group_as_before_and_the_json_says_it() -> None:
    groups, _ = compare(_hosts(fr.fleet(9, seed=3), None), stats.Rule(), stats.MIN_JUDGED)
    assert {g.key.cpu_arch for g in groups} == {None}
    assert all(g.key.label().startswith("8x NVIDIA H100 80GB HBM3 ") and "(" not in g.key.label() for g in groups)
    assert "cpu_arch" in data_file("report.schema.json").read_text()
    schema = SCHEMA["properties"]["groups"]["items"]["properties"]["cpu_arch"]
    for g in groups[:3]:
        jsonschema.validate(_group_dict(g)["cpu_arch"], schema)


# ---- learned baselines and the Prometheus labels carry the architecture too ------------------------------


def _write(nodes: list[fr.Node], folder: Path, cpu_arch: str | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for node in nodes:
        doc: dict[str, Any] = fr.report(node)
        if cpu_arch is not None:
            doc["host"]["cpu_arch"] = cpu_arch
        (folder / f"{node.host}.json").write_text(json.dumps(doc))
    return folder


def _two_architectures(tmp_path: Path) -> tuple[Path, list[fr.Node], list[fr.Node]]:
    """Ten x86 and ten Arm H100 nodes whose GPUs run 15 % faster behind the Arm CPU."""
    x86, arm = fr.fleet(10, seed=7, prefix="x86"), fr.fleet(10, seed=8, prefix="arm")
    for node in arm:
        node.tflops = {i: v * 1.15 for i, v in node.tflops.items()}
    folder = tmp_path / "reports"
    _write(x86, folder, "x86_64")
    _write(arm, folder, "arm64")  # as macOS spells it: learned under gpuenv's name
    return folder, x86, arm


def _median_tflops(nodes: list[fr.Node]) -> float:
    return statistics.median(v for n in nodes for v in n.tflops.values())


def test_baselines_are_learned_per_architecture_and_expected_there_only(tmp_path: Path) -> None:
    folder, x86, arm = _two_architectures(tmp_path)
    learned = learn_baselines(LearnRequest((folder,)))
    for table in ("busbw", "matmul_tflops", "figures"):
        assert {r.get("cpu_arch") for r in learned.baselines[table]} == {"x86_64", "aarch64"}, table
    path = tmp_path / "learned.json"
    path.write_text(checked_text(learned))
    shape = fr.SHAPES[1]
    on_arm = load_baselines(path, cpu_arch="aarch64").expected_tflops(fr.H100, "bf16", shape)
    on_x86 = load_baselines(path, cpu_arch="x86_64").expected_tflops(fr.H100, "bf16", shape)
    assert on_arm == pytest.approx(_median_tflops(arm), abs=1e-3)
    assert on_x86 == pytest.approx(_median_tflops(x86), abs=1e-3)
    assert load_baselines(path, cpu_arch="ppc64le").expected_tflops(fr.H100, "bf16", shape) is None  # none learned


def test_an_arm_node_below_its_own_figure_fails_where_the_x86_figure_would_pass(tmp_path: Path) -> None:
    folder, x86, _ = _two_architectures(tmp_path)
    path = tmp_path / "learned.json"
    path.write_text(checked_text(learn_baselines(LearnRequest((folder,)))))
    shape = fr.SHAPES[1]
    measured = _median_tflops(x86)  # normal on x86; 1/1.15 = 0.87 of the Arm nodes' figure
    arm_rows, x86_rows = load_baselines(path, cpu_arch="aarch64"), load_baselines(path, cpu_arch="x86_64")
    arm_expected = arm_rows.expected_tflops(fr.H100, "bf16", shape)
    x86_expected = x86_rows.expected_tflops(fr.H100, "bf16", shape)
    assert arm_expected is not None and x86_expected is not None
    assert x86_rows.judge(measured, x86_expected) == "pass"  # the healthy control
    assert arm_rows.judge(measured, arm_expected) == "warn"  # 0.87 of its own architecture's figure
    assert arm_rows.judge(measured * 0.8, arm_expected) == "fail"


def test_a_row_for_any_architecture_yields_to_one_for_this_architecture(tmp_path: Path) -> None:
    shipped = json.loads(data_file("baselines.json").read_text())
    generic = {"gpu": "H100", "match": ["H100"], "dtype": "bf16", "shape": "8x8x8", "tflops": 100.0}
    own = generic | {"tflops": 200.0, "cpu_arch": "aarch64"}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(shipped | {"matmul_tflops": [generic, own]}))
    jsonschema.validate(json.loads(path.read_text()), BASELINES_SCHEMA)
    assert load_baselines(path, cpu_arch="aarch64").expected_tflops(fr.H100, "bf16", "8x8x8") == 200.0
    assert load_baselines(path, cpu_arch="x86_64").expected_tflops(fr.H100, "bf16", "8x8x8") == 100.0
    here = load_baselines(path)  # this machine's architecture by default
    assert here.cpu_arch == ("aarch64" if os.uname().machine in ("aarch64", "arm64") else os.uname().machine)


def test_prometheus_groups_carry_the_architecture_where_reports_record_it(tmp_path: Path) -> None:
    folder, _, _ = _two_architectures(tmp_path)
    prom = to_prometheus(fleet_report(ReportRequest((folder,))))
    medians = [line for line in prom.splitlines() if line.startswith("gpuenv_fleet_group_median{")]
    assert any('cpu_arch="aarch64"' in line for line in medians)
    assert any('cpu_arch="x86_64"' in line for line in medians)
    old = to_prometheus(fleet_report(ReportRequest((_write(fr.fleet(9, seed=3), tmp_path / "old", None),))))
    assert "cpu_arch" not in old  # reports that do not record it: the label is left out (Prometheus reads "")
