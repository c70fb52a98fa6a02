"""fleet report and fleet verify with AMD Instinct nodes, from recorded MI300X reports: a mixed
fleet compares like with like (groups, outliers and baselines by GPU model, never an MI300X
against an H100), and an AMD host's problems are said with AMD's tools."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpuenv.fleet import stats
from gpuenv.fleet.baseline import LearnRequest, learn_baselines
from gpuenv.fleet.collect import HostOutcome, fleet_report_of
from gpuenv.fleet.report_compare import compare
from gpuenv.fleet.report_hosts import attention
from gpuenv.fleet.report_model import HostReport, is_amd
from gpuenv.fleet.report_reading import entry_of, host_report
from gpuenv.resources import data_file
from gpuenv.verify import reportfile
from tests.conftest import run_gpuenv
from tests.fleet import amd_reports as ar
from tests.fleet import fleet_reports as fr

REPORT_SCHEMA = json.loads(data_file("report.schema.json").read_text())
ALLREDUCE_512 = ("allreduce", 512 * fr.MiB)


def amd_host(node: fr.Node, **kw: Any) -> HostReport:
    return host_report(fr.typed(ar.report(node, **kw)), f"{node.host}.json")


def nvidia_host(node: fr.Node) -> HostReport:
    return host_report(fr.typed(fr.report(node)), f"{node.host}.json")


def write_mixed(folder: Path, h100: list[fr.Node], mi300x: list[fr.Node]) -> Path:
    fr.write(h100, folder)
    for node in mi300x:
        (folder / f"{node.host}.json").write_text(json.dumps(ar.report(node)))
    return folder


def test_recorded_amd_reports_are_real_verify_reports() -> None:
    node = ar.mi300x_fleet(1)[0]
    ar.xgmi_down(node, 5)
    doc = ar.report(node)
    jsonschema.validate(doc, REPORT_SCHEMA)
    host = amd_host(node)
    assert host.gpu_model == ar.MI300X and host.gpu_count == 8 and is_amd(host.gpu_model)
    assert host.failures[0][0] == "nvml.nvlink_down" and host.failures[0][1] == host.gpus[5]  # by AMD SMI's UUID


def test_a_mixed_fleet_is_grouped_by_model_and_neither_vendor_is_the_others_outlier() -> None:
    """12 H100 and 4 MI300X nodes: pooled, every MI300X figure would lie 14-17 % under an H100
    median; by model, the four MI300X are judged against the MI300X's expected figures where there
    are some (matmul, large allreduce), else described, not judged."""
    hosts = [nvidia_host(n) for n in fr.fleet(12)] + [amd_host(n) for n in ar.mi300x_fleet(4)]
    groups, outliers = compare(hosts, stats.Rule(), stats.MIN_JUDGED)
    assert outliers == []
    models = {g.key.gpu_model for g in groups}
    assert models == {fr.H100, ar.MI300X}
    amd_groups = [g for g in groups if g.key.gpu_model == ar.MI300X]
    assert amd_groups and all(g.hosts == 4 and not g.below for g in amd_groups)
    by_model = {g.key.metric() for g in amd_groups if g.basis == "expected"}
    assert by_model == {"amp.matmul_tflops", "allreduce.busbw_gbps allreduce 512 MiB"}
    assert all(g.expected is not None and g.expected.model == "MI300X" for g in amd_groups if g.judged)
    assert not any(g.key.figure == "nvml.sm_clock_mhz" for g in amd_groups)  # AMD SMI reads no loaded clocks
    pooled = [replace(h, gpu_model="any GPU") for h in hosts]  # the same hosts, the model ignored
    _, unfair = compare(pooled, stats.Rule(), stats.MIN_JUDGED)
    assert {o.host for o in unfair} == {f"mi300x-{i:04d}" for i in range(4)}  # what grouping by model prevents


def test_a_slow_mi300x_is_judged_against_mi300x_medians_only() -> None:
    h100, mi300x = fr.fleet(10), ar.mi300x_fleet(10)
    mi300x[3].tflops[6] *= 0.8
    mi300x[7].busbw[ALLREDUCE_512] *= 0.8
    hosts = [nvidia_host(n) for n in h100] + [amd_host(n) for n in mi300x]
    _groups, outliers = compare(hosts, stats.Rule(), stats.MIN_JUDGED)
    found = {(o.host, o.key.figure, o.gpu.cuda_index if o.gpu else None): o for o in outliers}
    assert set(found) == {("mi300x-0003", "amp.matmul_tflops", 6), ("mi300x-0007", "allreduce.busbw_gbps", None)}
    slow = found[("mi300x-0003", "amp.matmul_tflops", 6)]
    assert slow.key.gpu_model == ar.MI300X and slow.median == pytest.approx(700 * 0.86, rel=0.02)  # not 700
    assert slow.gpu is not None and slow.gpu.uuid == ar.uuid(mi300x[3], 6)


def test_an_amd_hosts_problems_are_said_with_amds_tools(tmp_path: Path) -> None:
    h100, mi300x = fr.fleet(10), ar.mi300x_fleet(10)
    ar.xgmi_down(mi300x[2], 5)
    mi300x[7].busbw[ALLREDUCE_512] *= 0.8
    h100[4].busbw[ALLREDUCE_512] *= 0.8
    result = run_gpuenv("fleet", "report", str(write_mixed(tmp_path / "r", h100, mi300x)), "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert {(g["gpu_model"], g["gpu_count"]) for g in data["groups"]} == {(fr.H100, 8), (ar.MI300X, 8)}
    failing = next(f for f in data["failures"] if f["code"] == "nvml.nvlink_down")
    assert [h["host"] for h in failing["hosts"]] == ["mi300x-0002"]
    reports = {h.host: h for h in _hosts(tmp_path / "r")}
    todo = {p.what: p.todo for a in attention(_fleet(reports)) for p in a.problems}
    xgmi = next(t for w, t in todo.items() if w.startswith("nvml.nvlink_down"))
    assert "amd-smi" in xgmi and "nvidia-smi" not in xgmi
    amd_slow = next(a for a in attention(_fleet(reports)) if a.host == "mi300x-0007").problems[0].todo
    nvidia_slow = next(a for a in attention(_fleet(reports)) if a.host == "gpu0004").problems[0].todo
    assert "amd-smi xgmi" in amd_slow and "nvidia-smi" in nvidia_slow and "amd-smi" not in nvidia_slow


def _hosts(folder: Path) -> list[HostReport]:
    return [host_report(fr.typed(json.loads(p.read_text())), str(p)) for p in sorted(folder.glob("*.json"))]


def _fleet(reports: dict[str, HostReport]) -> Any:
    outcomes = tuple(HostOutcome(h, r.outcome, r.path, None) for h, r in reports.items())  # type: ignore[arg-type]
    return fleet_report_of(outcomes, {h: entry_of(reportfile.read(r.path)) for h, r in reports.items()}, None)


def test_fleet_verify_over_amd_and_nvidia_hosts_compares_like_with_like(tmp_path: Path) -> None:
    """What fleet verify makes of the reports its hosts sent back (the run itself is Ansible's)."""
    h100, mi300x = fr.fleet(9), ar.mi300x_fleet(9)
    mi300x[5].temperature[1] += 15
    reports = {h.host: h for h in _hosts(write_mixed(tmp_path / "r", h100, mi300x))}
    result = _fleet(reports)
    assert [(o.host, o.key.gpu_model, o.key.figure) for o in result.outliers] == [
        ("mi300x-0005", ar.MI300X, "nvml.temperature_c")
    ]  # 10 °C warmer than an H100 is an MI300X's normal, 15 °C warmer than its peers is not
    assert {g.key.gpu_model for g in result.groups if g.judged} == {fr.H100, ar.MI300X}


def test_gpus_without_a_name_stay_with_their_vendor() -> None:
    amd = amd_host(ar.mi300x_fleet(1)[0], named=False)
    node = fr.fleet(1)[0]
    doc = fr.report(node)
    for g in doc["host"]["gpus"]:
        g["name"] = None
    nvidia = host_report(fr.typed(doc), "n.json")
    assert (amd.gpu_model, nvidia.gpu_model) == ("unknown AMD GPU", "unknown GPU")
    assert is_amd(amd.gpu_model) and not is_amd(nvidia.gpu_model)


def test_baselines_are_learned_per_model(tmp_path: Path) -> None:
    folder = write_mixed(tmp_path / "r", fr.fleet(6), ar.mi300x_fleet(6))
    doc = learn_baselines(LearnRequest((folder,))).baselines
    rows = [r for r in doc["matmul_tflops"] if r["shape"] == fr.SHAPES[1]]
    by_model = {tuple(r["match"]): r["tflops"] for r in rows}
    assert set(by_model) == {(fr.H100,), (ar.MI300X,)}
    assert by_model[(ar.MI300X,)] == pytest.approx(700 * 0.86, rel=0.02)
    assert by_model[(fr.H100,)] == pytest.approx(700, rel=0.02)
    busbw = {tuple(r["match"]) for r in doc["busbw"]}
    assert busbw == {(fr.H100,), (ar.MI300X,)}
