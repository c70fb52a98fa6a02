"""`gpuenv fleet report`: reading reports, robust statistics, outliers, failures, the formats and exit codes."""

from __future__ import annotations

import json
import os
import pickle
import random
import sqlite3
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpuenv.cli import COMMANDS, CommandEntry, main
from gpuenv.errors import BadRequest
from gpuenv.fleet import report_reading, stats
from gpuenv.fleet.report import ReportRequest, fleet_report
from gpuenv.fleet.report_compare import compare, failures_by_code
from gpuenv.fleet.report_model import FleetReport, Gpu, HostReport, Series
from gpuenv.fleet.report_reading import host_report, read_report
from gpuenv.output import fleet as formats
from gpuenv.resources import data_file
from gpuenv.verify.checks.nvml.snapshot import per_gpu_figures
from gpuenv.verify.facts import NvmlSnapshot, visible
from gpuenv.verify.figures import readings
from tests.conftest import gpuenv_main, require
from tests.fleet import fleet_reports as fr

SCHEMA = json.loads(data_file("schemas/fleet-report.schema.json").read_text())
REPORT_SCHEMA = json.loads(data_file("report.schema.json").read_text())
ALLREDUCE_512 = ("allreduce", 512 * fr.MiB)


def hosts_of(nodes: list[fr.Node]) -> list[HostReport]:
    return [host_report(fr.typed(fr.report(n)), f"{n.host}.json") for n in nodes]


def outliers_of(nodes: list[fr.Node], rule: stats.Rule | None = None, min_hosts: int = 8) -> list[dict[str, Any]]:
    _, outliers = compare(hosts_of(nodes), rule or stats.Rule(), min_hosts)
    return [o.to_dict() for o in outliers]


# ---- the statistics ---------------------------------------------------------------------------


def test_quantiles_interpolate_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    s = stats.summarize(values)
    assert (s.n, s.median, s.mad) == (5, 3.0, 1.0)
    assert s.p5 == pytest.approx(1.2) and s.p95 == pytest.approx(8.8)
    assert stats.quantile([7.0], 0.95) == 7.0


def test_the_mad_floor_keeps_an_all_equal_group_from_flagging_small_differences() -> None:
    s = stats.summarize([36.0] * 20)
    assert s.mad == 0
    mad = stats.floored_mad(s, mad_floor=1.0, mad_floor_rel=0.01)
    assert mad == 1.0
    assert not stats.is_outlier(38.0, s, mad, "lower", stats.Rule())  # z = 1.35
    assert stats.is_outlier(45.0, s, mad, "lower", stats.Rule())  # z = 6.07, 25% off
    rates = stats.summarize([700.0] * 20)
    assert stats.floored_mad(rates, mad_floor=0.0, mad_floor_rel=0.01) == 7.0  # 1% of the median


def test_only_the_bad_direction_counts_and_both_thresholds_must_hold() -> None:
    s = stats.summarize([100.0 + (i % 5) for i in range(50)])  # median 102, MAD 1
    mad = stats.floored_mad(s, mad_floor=0.0, mad_floor_rel=0.01)
    assert stats.is_outlier(80.0, s, mad, "higher", stats.Rule())
    assert not stats.is_outlier(130.0, s, mad, "higher", stats.Rule())  # faster is never an outlier
    assert stats.is_outlier(130.0, s, mad, "lower", stats.Rule())
    assert not stats.is_outlier(97.0, s, mad, "higher", stats.Rule())  # z = -3.4: within 3.5
    assert not stats.is_outlier(95.0, s, mad, "higher", stats.Rule(z=3.5, min_deviation=0.1))  # 6.9% < 10%
    assert stats.is_outlier(95.0, s, mad, "higher", stats.Rule(z=3.5, min_deviation=0.05))


# ---- outliers in synthetic fleets --------------------------------------------------------------


def test_a_slow_host_a_weak_gpu_and_a_hot_gpu_are_found_and_named() -> None:
    nodes = fr.fleet(60)
    nodes[11].busbw[ALLREDUCE_512] *= 0.8
    nodes[23].tflops[5] *= 0.85
    nodes[42].temperature[2] += 12
    found = {(o["host"], o["metric"], o["gpu_index"]): o for o in outliers_of(nodes)}
    assert set(found) == {
        ("gpu0011", "allreduce.busbw_gbps", None),
        ("gpu0023", "amp.matmul_tflops", 5),
        ("gpu0042", "nvml.temperature_c", 2),
    }
    slow = found[("gpu0011", "allreduce.busbw_gbps", None)]
    assert (slow["collective"], slow["bytes"], slow["gpu_uuid"]) == ("allreduce", 512 * fr.MiB, None)
    assert slow["z"] < -3.5 and slow["value"] < 0.85 * slow["median"]
    weak = found[("gpu0023", "amp.matmul_tflops", 5)]
    assert (weak["gpu_uuid"], weak["gpu_serial"]) == ("GPU-gpu0023-5", "SN-gpu0023-5")
    hot = found[("gpu0042", "nvml.temperature_c", 2)]
    assert hot["z"] > 3.5 and hot["unit"] == "°C" and hot["gpu_serial"] == "SN-gpu0042-2"


def test_low_clocks_and_high_energy_are_outliers_and_good_directions_are_not() -> None:
    nodes = fr.fleet(30, seed=4)
    nodes[3].clock[1] = 1500
    nodes[4].energy[7] *= 1.3
    nodes[5].tflops[0] *= 1.3  # faster: not an outlier
    nodes[6].temperature[0] -= 10  # cooler: not an outlier
    nodes[7].busbw[ALLREDUCE_512] *= 1.3
    found = {(o["host"], o["metric"], o["gpu_index"]) for o in outliers_of(nodes)}
    assert found == {("gpu0003", "nvml.sm_clock_mhz", 1), ("gpu0004", "amp.energy_per_step_j", 7)}


def test_a_clean_fleet_of_1000_hosts_gives_no_outlier() -> None:
    nodes = fr.fleet(1000, seed=7)
    groups, outliers = compare(hosts_of(nodes), stats.Rule(), stats.MIN_JUDGED)
    assert outliers == []
    assert groups and all(g.judged and g.hosts == 1000 for g in groups)
    tflops = next(g for g in groups if g.key.figure == "amp.matmul_tflops")
    assert tflops.summary.n == 8000 and tflops.summary.p5 < tflops.summary.median < tflops.summary.p95


def test_small_groups_are_judged_against_their_models_figure_or_described() -> None:
    """Seven A100 hosts: no median to judge them by; the matmul and the large allreduce against the
    A100 SXM 80GB's expected figures (a host at half the busbw is under them), the rest described."""
    big = fr.fleet(20, seed=2)
    small = fr.fleet(7, seed=3, prefix="a100-", model="NVIDIA A100-SXM4-80GB")
    small[0].tflops[0] *= 0.5  # 350 TFLOP/s: still above the 271 a healthy A100 reaches
    small[1].busbw[ALLREDUCE_512] *= 0.5
    groups, outliers = compare(hosts_of(big + small), stats.Rule(), stats.MIN_JUDGED)
    assert outliers == []
    a100 = [g for g in groups if g.key.gpu_model.startswith("NVIDIA A100")]
    assert a100 and all(g.hosts == 7 and "under 8" in (g.note or "") for g in a100)
    by_model = {g.key.metric(): g for g in a100 if g.basis == "expected"}
    assert set(by_model) == {"amp.matmul_tflops", "allreduce.busbw_gbps allreduce 512 MiB"}
    [low] = by_model["allreduce.busbw_gbps allreduce 512 MiB"].below
    assert (low.host, low.severity, low.expected.model) == ("a100-0001", "warn", "A100 SXM 80GB")
    assert all(not g.judged and "no expected figure" in (g.note or "") for g in a100 if g.basis is None)
    assert all(g.basis == "peers" for g in groups if g not in a100)


def test_gpu_count_splits_groups() -> None:
    eights = fr.fleet(10, seed=5)
    fours = fr.fleet(10, seed=6, prefix="four", gpus=4)
    for node in fours:  # half the bandwidth of an 8-GPU node is normal for 4 GPUs, not an outlier
        node.busbw = {k: v * 0.5 for k, v in node.busbw.items()}
    groups, outliers = compare(hosts_of(eights + fours), stats.Rule(), stats.MIN_JUDGED)
    assert outliers == []
    assert {g.key.gpu_count for g in groups} == {4, 8}


def test_threshold_and_deviation_floor_are_configurable() -> None:
    nodes = fr.fleet(30, seed=8)
    nodes[2].tflops[3] *= 0.9
    assert [o["host"] for o in outliers_of(nodes)] == ["gpu0002"]
    assert outliers_of(nodes, stats.Rule(min_deviation=0.2)) == []
    assert outliers_of(nodes, stats.Rule(z=50)) == []
    assert outliers_of(nodes, min_hosts=31) == []


# ---- reading ------------------------------------------------------------------------------------


def test_folders_are_read_recursively_and_bad_files_named_and_skipped(tmp_path: Path) -> None:
    nodes = fr.fleet(10)
    fr.write(nodes[:5], tmp_path / "run1")
    fr.write(nodes[5:], tmp_path / "run2" / "deeper")
    (tmp_path / "run1" / "inventory.json").write_text('{"all": {"hosts": []}}')
    (tmp_path / "run1" / "cut.json").write_text(json.dumps(fr.report(nodes[0]))[:200])
    (tmp_path / "run1" / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "run1" / "notes.txt").write_text("not read: not *.json")
    loose = tmp_path / "loose-report"  # a file named on the command line is read whatever its name
    loose.write_text(json.dumps(fr.report(fr.healthy_node("loose", random.Random(1)))))
    result = fleet_report(ReportRequest((tmp_path / "run1", tmp_path / "run2", loose)))
    assert sorted(h.host for h in result.hosts) == sorted([n.host for n in nodes] + ["loose"])
    reasons = {Path(s.path).name: s.reason for s in result.skipped}
    assert set(reasons) == {"inventory.json", "cut.json", "binary.json"}
    assert reasons["inventory.json"] == "not a gpuenv verify report"
    assert reasons["cut.json"].startswith("corrupt") and reasons["binary.json"].startswith("corrupt")


def test_a_report_of_the_previous_schema_still_loads(tmp_path: Path) -> None:
    node = fr.healthy_node("old", random.Random(3))
    fr.ecc_failure(node, 1)
    data = fr.report(node)
    data["schema"] = "gpuenv.verify-report/1"
    for check in data["checks"]:
        for f in check["findings"]:
            del f["code"]  # /1 findings had no code
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    entry = read_report(path)
    assert isinstance(entry, HostReport) and entry.outcome == "not certified"
    assert entry.failures[0][0] == "nvml.fail" and entry.failures[0][1] is not None
    assert sum(len(s.values) for s in entry.series) == 8 * 4 + len(fr.SIZES)


def test_each_host_is_compared_by_its_latest_report(tmp_path: Path) -> None:
    nodes = fr.fleet(9)
    folder = fr.write(nodes, tmp_path / "today")
    fr.ecc_failure(nodes[0], 1)
    nodes[0].tflops[2] *= 0.5
    old = fr.report(nodes[0])
    old["started"] = "2026-11-29T15:04:05+00:00"  # yesterday's run failed; today's certified
    (tmp_path / "yesterday").mkdir()
    (tmp_path / "yesterday" / "gpu0000.json").write_text(json.dumps(old))
    result = fleet_report(ReportRequest((tmp_path / "yesterday", folder)))
    assert len(result.hosts) == 9 and result.superseded == 1
    assert result.healthy and not result.failures and not result.outliers
    assert "(1 older report(s) of the same hosts set aside)" in formats.outcome_line(result)


def test_fleet_verify_outcomes_name_the_hosts_and_count_those_without_a_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "reports" / "20261130T150405Z"
    nodes = fr.fleet(2)
    nodes[0].host = "node-a.cluster"  # the report's hostname; the inventory calls it gpu01
    fr.write(nodes, run)
    summary = {
        "schema": "gpuenv.fleet-verify/1",
        "hosts": [  # paths as fleet verify wrote them, relative to where it ran
            {"host": "gpu01", "outcome": "certified", "report": f"{run.relative_to(tmp_path)}/node-a.cluster.json"},
            {"host": "gpu0001", "outcome": "certified", "report": str(run / "gpu0001.json")},
            {"host": "gpu02", "outcome": "unreachable", "report": None, "message": "check SSH to the host"},
            {"host": "gpu03", "outcome": "not provisioned", "report": None, "message": "run gpuenv provision"},
        ],
    }
    (run / "fleet-verify.json").write_text(json.dumps(summary))
    monkeypatch.chdir(tmp_path.parent)  # read from elsewhere: the report found beside the summary
    result = fleet_report(ReportRequest((run,)))
    assert not result.skipped
    assert sorted(h.host for h in result.hosts) == ["gpu0001", "gpu01", "gpu02", "gpu03"]
    counts = result.outcomes()
    assert (counts["certified"], counts["unreachable"], counts["not provisioned"]) == (2, 1, 1)
    assert result.exit_code == 1
    assert next(h for h in result.hosts if h.host == "gpu01").gpu_count == 8


def test_the_reader_reads_the_summary_fleet_verify_writes(tmp_path: Path) -> None:
    from gpuenv.fleet import collect
    from gpuenv.verify import reportfile

    hosts = (
        collect.HostOutcome("a", "certified", None, None),
        collect.HostOutcome("b", "interrupted", None, "stopped"),
    )
    path = tmp_path / collect.SUMMARY_FILE
    path.write_text(json.dumps(collect.FleetVerifyResult(hosts, tmp_path, "successful", None).to_dict()))
    found = reportfile.read(path)
    assert isinstance(found, reportfile.ReportFile) and isinstance(found.document, reportfile.FleetVerifySummary)
    assert [(row.host, row.outcome) for row in found.document.hosts] == [("a", "certified"), ("b", "interrupted")]


def test_a_malformed_report_is_skipped_not_fatal(tmp_path: Path) -> None:
    data = fr.report(fr.healthy_node("x", random.Random(1)))
    data["host"] = "not an object"
    path = tmp_path / "x.json"
    path.write_text(json.dumps(data))
    entry = read_report(path)
    assert not isinstance(entry, HostReport) and entry.reason.startswith("corrupt: malformed")


def test_no_report_at_all_is_a_bad_request(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("[]")
    with pytest.raises(BadRequest, match=r"no gpuenv verify report .*1 file\(s\) skipped"):
        fleet_report(ReportRequest((tmp_path,)))
    with pytest.raises(BadRequest, match="no such file or folder"):
        fleet_report(ReportRequest((tmp_path / "missing",)))


def test_what_is_not_a_regular_file_is_skipped_without_blocking(tmp_path: Path) -> None:
    fr.write(fr.fleet(2), tmp_path)
    os.mkfifo(tmp_path / "pipe.json")  # opened for reading, a FIFO without a writer would wait forever
    result = fleet_report(ReportRequest((tmp_path,)))
    assert len(result.hosts) == 2
    assert [(Path(s.path).name, s.reason) for s in result.skipped] == [("pipe.json", "not a regular file")]


def test_what_orjson_refuses_json_still_reads(tmp_path: Path) -> None:
    data = fr.report(fr.healthy_node("nan", random.Random(2)))
    data["checks"][0]["metrics"]["note"] = float("nan")  # Python's json writes NaN; orjson refuses it
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(data))
    assert isinstance(read_report(path), HostReport)


def test_a_host_report_crosses_a_process_boundary_unchanged() -> None:
    node = fr.healthy_node("x", random.Random(4))
    fr.ecc_failure(node, 1)
    entry = host_report(fr.typed(fr.report(node)), "x.json", matmul=True, costs=True)
    copy = pickle.loads(pickle.dumps(entry))
    assert copy == entry and isinstance(copy.gpus[0], Gpu) and isinstance(copy.series[0], Series)


def test_worker_processes_read_and_record_as_this_process_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require(len(os.sched_getaffinity(0)) > 1, "reading in worker processes needs two CPUs")
    nodes = fr.fleet(40, seed=5)
    nodes[3].busbw[ALLREDUCE_512] *= 0.6
    fr.ecc_failure(nodes[7], 2)
    folder = fr.write(nodes, tmp_path / "reports")
    (folder / "cut.json").write_text("{")
    in_process = fleet_report(ReportRequest((folder,), history=tmp_path / "one.sqlite"))
    monkeypatch.setattr(report_reading, "PARALLEL_FROM", 2)  # 41 files: read by the workers, in shares
    in_workers = fleet_report(ReportRequest((folder,), history=tmp_path / "two.sqlite"))
    assert in_workers.to_dict() == in_process.to_dict()
    assert in_workers.outliers and in_workers.failures and len(in_workers.skipped) == 1
    for db in ("one.sqlite", "two.sqlite"):
        with sqlite3.connect(tmp_path / db) as con:
            assert con.execute("SELECT count(*), count(DISTINCT host) FROM reports").fetchone() == (40, 40)
            assert con.execute("SELECT count(*) FROM gpus").fetchone() == (40 * 8,)


# ---- failures by code ---------------------------------------------------------------------------


def test_failing_findings_are_grouped_by_code_with_hosts_and_gpus() -> None:
    nodes = fr.fleet(5)
    fr.ecc_failure(nodes[1], 3)
    fr.ecc_failure(nodes[1], 4)
    fr.ecc_failure(nodes[4], 0)
    hosts = hosts_of(nodes)
    timed_out = fr.report(nodes[2])
    timed_out["checks"][2].update(status="timeout", findings=[])
    timed_out["verdict"]["outcome"] = "not certified"
    hosts[2] = host_report(fr.typed(timed_out), "gpu0002.json")
    failures = failures_by_code(hosts)
    assert [f.code for f in failures] == ["nvml.ecc_uncorrected", "amp.timeout"]
    ecc = dict(failures[0].hosts)
    assert [(g.cuda_index, g.uuid, g.serial) for g in ecc["gpu0001"]] == [
        (3, "GPU-gpu0001-3", "SN-gpu0001-3"),
        (4, "GPU-gpu0001-4", "SN-gpu0001-4"),
    ]
    assert [g.cuda_index for g in ecc["gpu0004"]] == [0]
    assert dict(failures[1].hosts) == {"gpu0002": ()}


# ---- formats and the command --------------------------------------------------------------------


def planted(tmp_path: Path) -> tuple[Path, FleetReport]:
    nodes = fr.fleet(12)
    nodes[3].tflops[6] *= 0.8
    fr.ecc_failure(nodes[5], 2)
    folder = fr.write(nodes, tmp_path / "reports")
    return folder, fleet_report(ReportRequest((folder,)))


def test_json_follows_its_schema_and_names_what_the_issue_asks(tmp_path: Path) -> None:
    _, result = planted(tmp_path)
    data = json.loads(json.dumps(result.to_dict()))
    jsonschema.validate(data, SCHEMA)
    assert data["schema"] == "gpuenv.fleet-report/2" and data["healthy"] is False
    assert {"host", "outcome", "report"} <= set(data["hosts"][0])
    assert data["failures"][0]["code"] == "nvml.ecc_uncorrected"
    assert data["failures"][0]["hosts"][0]["host"] == "gpu0005"
    outlier = data["outliers"][0]
    assert {k: outlier[k] for k in ("host", "gpu_index", "gpu_uuid", "metric")} == {
        "host": "gpu0003",
        "gpu_index": 6,
        "gpu_uuid": "GPU-gpu0003-6",
        "metric": "amp.matmul_tflops",
    }
    assert outlier["value"] < outlier["median"] and outlier["z"] < -3.5
    group = next(g for g in data["groups"] if g["metric"] == "amp.matmul_tflops")
    assert {"median", "mad", "p5", "p95", "n"} <= set(group) and group["n"] == 96


def test_markdown_and_prometheus_say_the_same(tmp_path: Path) -> None:
    _, result = planted(tmp_path)
    md = formats.to_markdown(result)
    assert "| gpu0003 | 6 | GPU-gpu0003-6 | SN-gpu0003-6 | amp.matmul_tflops |" in md
    assert "| nvml.ecc_uncorrected | 1 | gpu0005 (GPU 2 GPU-gpu0005-2) |" in md
    assert "allreduce.busbw_gbps allreduce 512 MiB" in md
    prom = formats.to_prometheus(result)
    assert "gpuenv_fleet_healthy 0" in prom and "gpuenv_fleet_outliers 1" in prom
    assert 'gpuenv_fleet_hosts{outcome="not certified"} 1' in prom
    assert 'gpuenv_fleet_failure_hosts{code="nvml.ecc_uncorrected"} 1' in prom
    assert 'gpuenv_fleet_outlier_value{host="gpu0003",metric="amp.matmul_tflops",gpu="6",' in prom
    for line in prom.splitlines():  # every sample line is `name{labels} number`
        if not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])


def run_cli(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """The real entry point (errors to exit codes), with the command under a name of its own here."""
    monkeypatch.setitem(COMMANDS, "fleet-report", CommandEntry("gpuenv.cli.fleet_report_cmd:report"))
    with pytest.raises(SystemExit) as exit_info:
        main(["fleet-report", *args])
    return int(exit_info.value.code or 0)


def test_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    clean = fr.write(fr.fleet(10), tmp_path / "clean")
    assert run_cli(monkeypatch, str(clean)) == 0
    assert "10 host(s): 10 certified; 0 outlier(s): fleet healthy" in capsys.readouterr().out
    outlier, _ = planted(tmp_path)
    assert run_cli(monkeypatch, str(outlier), "--json") == 1
    assert json.loads(capsys.readouterr().out)["outliers"]
    failed = fr.fleet(10)
    fr.ecc_failure(failed[0], 0)
    assert run_cli(monkeypatch, str(fr.write(failed, tmp_path / "failed")), "--markdown") == 1
    assert capsys.readouterr().out.startswith("# Fleet report")
    (tmp_path / "empty").mkdir()
    assert run_cli(monkeypatch, str(tmp_path / "empty")) == 2
    assert "no gpuenv verify report" in capsys.readouterr().err
    assert run_cli(monkeypatch, str(clean), "--json", "--markdown") == 2
    monkeypatch.setenv("GPUENV_TEST_FAULT", "fleet-read:explode")  # the test hook, misspelt
    assert run_cli(monkeypatch, str(clean)) == 2
    assert "bad GPUENV_TEST_FAULT entry" in capsys.readouterr().err


def test_prometheus_file_is_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = fr.write(fr.fleet(9), tmp_path / "r")
    prom = tmp_path / "fleet.prom"
    assert run_cli(monkeypatch, str(folder), "--prometheus", str(prom)) == 0
    assert "gpuenv_fleet_healthy 1" in prom.read_text()
    assert run_cli(monkeypatch, str(folder), "--prometheus", str(tmp_path / "no" / "such.prom")) == 2


# ---- the per-GPU figures the nvml check reports -------------------------------------------------


def test_nvml_reports_temperature_and_loaded_clocks_by_cuda_index() -> None:
    snap = NvmlSnapshot.from_dict(
        {
            "driver": "570",
            "cuda_driver": "12.8",
            "gpus": [
                {"index": 0, "uuid": "GPU-a", "temperature": 40, "sm_clock_under_load": 1980},
                {"index": 1, "uuid": "GPU-b", "temperature": 55, "sm_clock_under_load": None},
                {"index": 2, "uuid": "GPU-c", "temperature": None},
            ],
        }
    )
    gpus = visible(snap.gpus, "1,0")  # CUDA index 0 is NVML's GPU 1
    metrics = per_gpu_figures(snap, gpus)
    assert metrics == {"temperature_c": {"0": 55, "1": 40}, "sm_clock_mhz": {"1": 1980}}
    found = {(r.figure.name, r.gpu_index): r.value for r in readings([{"name": "nvml", "metrics": metrics}])}
    assert found == {("nvml.temperature_c", 0): 55, ("nvml.temperature_c", 1): 40, ("nvml.sm_clock_mhz", 1): 1980}
    assert per_gpu_figures(NvmlSnapshot("570", "12.8", [{"index": 0}]), visible([{"index": 0}], None)) == {}


def test_synthetic_reports_are_real_verify_reports() -> None:
    node = fr.healthy_node("x", random.Random(1))
    fr.ecc_failure(node, 0)
    jsonschema.validate(fr.report(node), REPORT_SCHEMA)


# ---- cost by node kind ------------------------------------------------------------------------


def test_the_config_files_prices_put_node_kinds_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    h100 = fr.fleet(4)
    fr.ecc_failure(h100[0], 0)  # a failing node's figures say nothing of what its kind delivers
    a100 = fr.fleet(2, prefix="a", seed=2, model="NVIDIA A100-SXM4-80GB")
    folder = fr.write(h100 + a100, tmp_path / "r")
    config = tmp_path / "config.toml"
    config.write_text("[prices]\nH100 = 2.5\n")
    assert gpuenv_main("--config", str(config), "fleet", "report", str(folder), "--json") == 1
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, SCHEMA)
    kinds = {c["node_kind"]: c for c in data["costs"]}
    h = kinds[f"8 × {fr.H100}"]
    assert (h["nodes"], h["priced_nodes"], h["usd_per_hour"]) == (3, 3, 20.0)
    [tflop_hour] = [c for c in h["costs"] if c["key"] == "usd_per_tflop_hour"]
    assert tflop_hour["value"] == pytest.approx(20.0 / (8 * 700.0), rel=0.03)  # the node over its GPUs' sum
    a = kinds["8 × NVIDIA A100-SXM4-80GB"]
    assert a["priced_nodes"] == 0 and a["costs"] == [] and "NVIDIA A100-SXM4-80GB" in a["note"]
    assert gpuenv_main("--config", str(config), "fleet", "report", str(folder), "--markdown") == 1
    md = capsys.readouterr().out
    assert "## Cost by node kind" in md and f"| 8 × {fr.H100} | 3 | 20 |" in md
    assert "- cost: 8 × NVIDIA A100-SXM4-80GB: no price in [prices]" in md


def test_no_prices_no_cost_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = fr.write(fr.fleet(3), tmp_path / "r")
    assert gpuenv_main("--no-config", "fleet", "report", str(folder), "--json") == 0
    assert json.loads(capsys.readouterr().out)["costs"] == []
    assert gpuenv_main("--no-config", "fleet", "report", str(folder)) == 0
    assert "Cost by node kind" not in capsys.readouterr().out
