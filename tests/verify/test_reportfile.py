"""The one reader of verify reports: schema /1 and /2 as verify's own model writes them, reports holding
NaN (as Python's json wrote them), wrong types refused with the place named, what is no report named."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
from typing import Any, get_args, get_type_hints

import pytest

from gpuenv.resources import data_file
from gpuenv.types import OUTCOMES, REPORT_OUTCOMES
from gpuenv.verify import model, reportfile
from gpuenv.verify.reportfile import FleetVerifySummary, ReportFile, Skipped, VerifyReport, VerifyReportV1
from tests.fleet import fleet_reports as fr


def node_report(seed: int = 1, *, failing: bool = False) -> dict[str, Any]:
    node = fr.healthy_node(f"gpu{seed:03d}", random.Random(seed))
    if failing:
        fr.ecc_failure(node, 2)
    return fr.report(node)


def written(tmp_path: Path, doc: Any, name: str = "report.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))  # as Python's json writes it: NaN and Infinity as bare words
    return path


def read_report(path: Path) -> VerifyReport:
    found = reportfile.read(path)
    assert isinstance(found, ReportFile), found
    assert isinstance(found.document, VerifyReport)
    return found.document


def test_a_report_of_schema_2_reads_typed(tmp_path: Path) -> None:
    doc = node_report(failing=True)
    path = written(tmp_path, doc)
    found = reportfile.read(path)
    assert isinstance(found, ReportFile) and found.raw == path.read_bytes() and found.mtime == path.stat().st_mtime
    report = found.document
    assert isinstance(report, VerifyReport) and report.schema == "gpuenv.verify-report/2"
    assert report.verdict is not None and report.verdict.outcome == "not certified" and report.verdict.exit_code == 1
    assert report.host.hostname == "gpu001" and [g.cuda_index for g in report.host.gpus] == list(range(8))
    assert report.host.gpus[2].uuid == "GPU-gpu001-2" and report.started == doc["started"]
    nvml = report.checks[0]
    assert (nvml.name, nvml.status) == ("nvml", "fail")
    finding = nvml.findings[0]
    assert (finding.severity, finding.code) == ("fail", "nvml.ecc_uncorrected")
    assert finding.gpu is not None and (finding.gpu.index, finding.gpu.uuid) == (2, "GPU-gpu001-2")
    assert nvml.metrics == doc["checks"][0]["metrics"]
    assert nvml.detail_value() == doc["checks"][0]["detail"]  # kept raw, decoded on demand


def test_a_report_of_schema_1_still_reads(tmp_path: Path) -> None:
    doc = node_report(failing=True)
    doc["schema"] = "gpuenv.verify-report/1"
    del doc["timings"]
    for check in doc["checks"]:
        for f in check["findings"]:
            del f["code"]  # /1 findings had no code
    report = read_report(written(tmp_path, doc))
    assert isinstance(report, VerifyReportV1) and report.schema == "gpuenv.verify-report/1"
    assert report.checks[0].findings[0].code is None and report.checks[0].findings[0].severity == "fail"


def test_nan_and_infinity_read_as_python_json_reads_them(tmp_path: Path) -> None:
    doc = node_report()
    doc["checks"][2]["metrics"]["matmul_tflops"]["3"] = float("nan")
    doc["checks"][2]["metrics"]["loss"] = float("inf")
    doc["checks"][1]["duration_s"] = float("nan")
    doc["checks"][0]["detail"]["snapshot"]["gpus"][0]["temperature"] = float("-inf")
    assert b"NaN" in json.dumps(doc).encode()  # not JSON: a fast decoder refuses it
    report = read_report(written(tmp_path, doc))
    assert math.isnan(report.checks[2].metrics["matmul_tflops"]["3"]) and report.checks[2].metrics["loss"] == math.inf
    assert math.isnan(report.checks[1].duration_s)
    assert report.checks[0].detail_value()["snapshot"]["gpus"][0]["temperature"] is None  # no reading
    assert report.checks[2].metrics["matmul_tflops"]["0"] == doc["checks"][2]["metrics"]["matmul_tflops"]["0"]


def test_both_ways_of_reading_give_the_same_report(tmp_path: Path) -> None:
    doc = node_report(failing=True)
    fast = read_report(written(tmp_path, doc))
    doc["checks"][2]["metrics"]["note"] = float("nan")  # read the slow way
    slow = read_report(written(tmp_path, doc))
    assert slow.checks[2].metrics.pop("note") is not None
    assert (slow.host, slow.verdict, slow.started) == (fast.host, fast.verdict, fast.started)
    for a, b in zip(slow.checks, fast.checks, strict=True):
        assert (a.name, a.status, a.findings, a.metrics, a.detail_value()) == (
            b.name,
            b.status,
            b.findings,
            b.metrics,
            b.detail_value(),
        )


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d["checks"][1].update(duration_s="fast"), "`$.checks[1].duration_s`"),
        (lambda d: d["host"]["gpus"][3].update(index="3"), "`$.host.gpus[3].index`"),
        (lambda d: d["verdict"].update(exit_code=True), "`$.verdict.exit_code`"),
        (lambda d: d["verdict"].update(outcome="fine"), "`$.verdict.outcome`"),
        (lambda d: d.update(host="not an object"), "`$.host`"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_where(tmp_path: Path, change: Any, where: str) -> None:
    doc = node_report()
    change(doc)
    found = reportfile.read(written(tmp_path, doc))
    assert isinstance(found, Skipped) and found.reason.startswith("corrupt: malformed: ") and where in found.reason
    with pytest.raises(reportfile.UnreadableReport, match=r"\$\."):
        reportfile.decode(json.dumps(doc).encode())


def test_a_wrong_type_is_refused_in_a_report_holding_nan_too(tmp_path: Path) -> None:
    doc = node_report()
    doc["checks"][0]["metrics"]["note"] = float("nan")
    doc["host"]["gpus"][0]["uuid"] = 7
    found = reportfile.read(written(tmp_path, doc))
    assert isinstance(found, Skipped) and "`$.host.gpus[0].uuid`" in found.reason


def test_what_is_no_report_is_named(tmp_path: Path) -> None:
    reasons = {
        name: reportfile.read(written(tmp_path, doc, name))
        for name, doc in (("inventory.json", {"all": {"hosts": []}}), ("list.json", []), ("other.json", {"schema": 3}))
    }
    assert {n: getattr(r, "reason", None) for n, r in reasons.items()} == dict.fromkeys(
        reasons, "not a gpuenv verify report"
    )
    (tmp_path / "cut.json").write_text(json.dumps(node_report())[:300])
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    os.mkfifo(tmp_path / "pipe.json")  # opened for reading, a FIFO without a writer would wait forever
    cut, binary, pipe = (reportfile.read(tmp_path / n) for n in ("cut.json", "binary.json", "pipe.json"))
    assert isinstance(cut, Skipped) and cut.reason.startswith("corrupt: ")
    assert isinstance(binary, Skipped) and binary.reason.startswith("corrupt: ")
    assert pipe == Skipped(str(tmp_path / "pipe.json"), "not a regular file")
    absent = reportfile.read(tmp_path / "absent.json")
    assert isinstance(absent, Skipped) and absent.reason.startswith("unreadable: ")


def test_the_fleet_verify_summary_reads_typed(tmp_path: Path) -> None:
    rows = [
        {"host": "gpu01", "outcome": "certified", "report": "r/gpu01.json"},
        {"host": "gpu02", "outcome": "interrupted", "report": "r/gpu02.json"},
        {"host": "gpu03", "outcome": "unreachable", "report": None, "message": "check SSH to the host"},
    ]
    found = reportfile.read(written(tmp_path, {"schema": reportfile.FLEET_VERIFY_SCHEMA, "hosts": rows}))
    assert isinstance(found, ReportFile) and isinstance(found.document, FleetVerifySummary)
    assert [(r.host, r.outcome, r.report) for r in found.document.hosts] == [
        ("gpu01", "certified", "r/gpu01.json"),
        ("gpu02", "interrupted", "r/gpu02.json"),
        ("gpu03", "unreachable", None),
    ]
    rows[0]["outcome"] = "splendid"
    refused = reportfile.read(written(tmp_path, {"schema": reportfile.FLEET_VERIFY_SCHEMA, "hosts": rows}))
    assert isinstance(refused, Skipped) and "`$.hosts[0].outcome`" in refused.reason


def test_a_reports_verdict_as_provision_and_fleet_verify_judge_it(tmp_path: Path) -> None:
    doc = node_report()
    assert reportfile.verdict_of(written(tmp_path, doc)) == ("certified", doc["verdict"]["summary"])
    doc["verdict"].update(outcome="interrupted", certified=False, exit_code=3, summary="interrupted by SIGTERM")
    assert reportfile.verdict_of(written(tmp_path, doc)) == ("interrupted", "interrupted by SIGTERM")
    del doc["verdict"]
    assert reportfile.verdict_of(written(tmp_path, doc)) == (reportfile.UNREADABLE, None)
    summary = {"schema": reportfile.FLEET_VERIFY_SCHEMA, "hosts": []}
    assert reportfile.verdict_of(written(tmp_path, summary)) == (reportfile.UNREADABLE, None)
    assert reportfile.verdict_of(tmp_path / "absent.json") == (reportfile.UNREADABLE, None)


def test_outcomes_are_one_vocabulary_from_the_writer_to_the_fleet() -> None:
    written_by_verify = get_args(get_type_hints(model.Verdict)["outcome"])
    assert written_by_verify == REPORT_OUTCOMES
    schema = json.loads(data_file("report.schema.json").read_text())
    assert list(REPORT_OUTCOMES) == schema["properties"]["verdict"]["properties"]["outcome"]["enum"]
    assert OUTCOMES[: len(REPORT_OUTCOMES)] == REPORT_OUTCOMES and "interrupted" in OUTCOMES
    assert OUTCOMES[len(REPORT_OUTCOMES) :] == ("unreachable", "timeout", "not provisioned")
