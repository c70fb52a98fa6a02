"""GPU identity history: real reports (built by verify's own model, checked against the shipped
schema) ingested into a real SQLite file; concurrent writers lose nothing; a returning GPU and a
GPU that moved are flagged; the CLI prints a timeline."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpuenv import config
from gpuenv.errors import BadRequest
from gpuenv.fleet import history
from gpuenv.fleet import history_records as records
from gpuenv.resources import data_file
from gpuenv.verify import catalogue, reportfile
from gpuenv.verify.model import CheckResult, GpuRef, Report, decide
from tests.conftest import run_gpuenv

WRITERS = 32
REPORTS_EACH = 5
REPORT_SCHEMA = json.loads(data_file("report.schema.json").read_text())


def gpu(index: int, uuid: str, serial: str) -> dict[str, Any]:
    bus = f"00000000:{index + 0x17:02X}:00.0"
    return {"index": index, "name": "NVIDIA H100 80GB HBM3", "uuid": uuid, "serial": serial, "pci_bus_id": bus}


def report(
    host: str, started: str, gpus: list[dict[str, Any]], *, xid_on: str | None = None, checked: bool = True
) -> dict[str, Any]:
    """A verify report as the engine writes it; xid_on: the UUID of a GPU a fatal XID is found on."""
    findings = []
    for g in gpus:
        if g["uuid"] == xid_on:
            ref = GpuRef(g["index"], g["uuid"], g["pci_bus_id"])
            findings.append(
                catalogue.finding(
                    "nvml.xid", f"GPU {g['index']}: XID 79", gpu=ref, xid=79, meaning="fallen off", recovery="reboot"
                )
            )
    checks = [CheckResult("nvml", "fail" if findings else "pass", 0.4, "nvml", {}, findings)]
    verdict = decide(checks, strict=False, cpu_only=False, interrupted=None)
    node = {"hostname": host, "gpus": gpus}
    doc = Report("quick", "cuda", False, started, started, "0.1", node, {}, checks, verdict, timings={"total": 1.0})
    data = doc.to_dict()
    if checked:
        jsonschema.validate(data, REPORT_SCHEMA)
    return data


def raw(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, indent=2).encode()  # as verify writes it


def record(doc: dict[str, Any], host: str | None = None) -> records.ReportRecord:
    """The record of a report, read as every reader reads it (gpuenv.verify.reportfile)."""
    report = reportfile.decode(raw(doc))
    assert isinstance(report, reportfile.VerifyReport)
    return records.record_from_report(report, raw=raw(doc), host=host)


def test_a_report_becomes_one_record_with_its_gpus_and_codes() -> None:
    doc = report(
        "gpu017", "2026-10-02T10:00:00+02:00", [gpu(0, "GPU-a", "S-a"), gpu(1, "GPU-b", "S-b")], xid_on="GPU-b"
    )
    rec = record(doc)
    assert (rec.host, rec.started, rec.outcome) == ("gpu017", "2026-10-02T08:00:00.000000Z", "not certified")
    assert rec.codes == ("nvml.xid",)
    a, b = rec.gpus
    assert (a.uuid, a.serial, a.bus_id, a.failed, a.codes) == ("GPU-a", "S-a", "00000000:17:00.0", False, ())
    assert (b.uuid, b.failed, b.codes) == ("GPU-b", True, ("nvml.xid",))
    assert record(doc, host="inventory-name").host == "inventory-name"


@pytest.mark.parametrize(
    "doc",
    [[], {"schema": "gpuenv.fleet-report/1"}, {"schema": "gpuenv.verify-report/2", "host": {}, "verdict": {}}],
)
def test_what_is_not_a_report_is_refused(doc: Any) -> None:
    with pytest.raises(reportfile.UnreadableReport):
        reportfile.decode(json.dumps(doc).encode())


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda d: d["host"].pop("hostname"), "without a host name"),
        (lambda d: d.pop("verdict"), "without its verdict"),
        (lambda d: d.update(started="yesterday"), "not a timestamp"),
    ],
)
def test_a_report_the_history_cannot_key_is_refused(change: Any, why: str) -> None:
    doc = report("n1", "2026-11-01T00:00:00Z", [gpu(0, "GPU-a", "S-a")])
    change(doc)
    with pytest.raises(records.NotAReport, match=why):
        record(doc)


def test_ingesting_files_names_those_it_cannot_record(tmp_path: Path) -> None:
    good, nameless = (report(h, "2026-11-01T00:00:00Z", [gpu(0, f"GPU-{h}", "S")]) for h in ("n1", "n2"))
    del nameless["host"]["hostname"]
    (tmp_path / "good.json").write_bytes(raw(good))
    (tmp_path / "nameless.json").write_bytes(raw(nameless))
    (tmp_path / "cut.json").write_bytes(raw(good)[:100])
    files = [(tmp_path / n, None) for n in ("good.json", "nameless.json", "cut.json", "absent.json")]
    result, skipped = history.ingest_files(tmp_path / "h.sqlite", files)
    assert result == history.IngestResult(1, 0)
    assert [line.split(": ", 1)[0] for line in skipped] == [str(f) for f, _ in files[1:]]
    assert "without a host name" in skipped[0] and "corrupt" in skipped[1] and "unreadable" in skipped[2]


def test_ingesting_the_same_report_twice_keeps_one_row(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    doc = report("n1", "2026-11-01T00:00:00Z", [gpu(0, "GPU-a", "S-a")])
    rec = record(doc)
    assert history.ingest(db, [rec]) == history.IngestResult(1, 0)
    assert history.ingest(db, [rec, rec]) == history.IngestResult(0, 2)
    by_inventory_name = record(doc, host="n1.rack3")  # fleet verify's name for it
    assert history.ingest(db, [by_inventory_name]) == history.IngestResult(0, 1)
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM reports").fetchone() == (1,)
        assert con.execute("SELECT count(*) FROM gpus").fetchone() == (1,)
        assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def _writer(db: str, worker: int) -> None:
    for n in range(REPORTS_EACH):
        uuid = f"GPU-{worker:03d}-{n}"
        node, started = f"node{worker:03d}", f"2026-11-{n + 1:02d}T00:00:00Z"
        doc = report(node, started, [gpu(0, uuid, f"S{worker}-{n}")], checked=False)
        history.ingest(Path(db), [record(doc)])


def test_32_processes_ingesting_at_once_lose_no_row(tmp_path: Path) -> None:
    db = tmp_path / "state" / "history.sqlite"  # made by whichever writer comes first
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(WRITERS)

    def run(worker: int) -> None:
        start.wait(timeout=60)
        _writer(str(db), worker)

    procs = [ctx.Process(target=run, args=(w,)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM reports").fetchone() == (WRITERS * REPORTS_EACH,)
        assert con.execute("SELECT count(DISTINCT uuid) FROM gpus").fetchone() == (WRITERS * REPORTS_EACH,)


class Contended:
    """A connection whose switch to WAL finds the file locked `times` times, as a fresh history's
    first writers do when SQLite refuses one of two lock upgrades at once rather than deadlock."""

    def __init__(self, times: int) -> None:
        self.refusals, self.tries = times, 0

    def execute(self, sql: str) -> None:
        assert sql == "PRAGMA journal_mode=WAL"
        self.tries += 1
        if self.tries <= self.refusals:
            raise sqlite3.OperationalError("database is locked")


def test_switching_to_wal_retries_a_locked_file_until_the_busy_timeout() -> None:
    db = Contended(times=3)
    history.wal(db)  # type: ignore[arg-type]
    assert db.tries == 4
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        history.wal(Contended(times=1000), timeout=0.05)  # type: ignore[arg-type]


def fleet_history(db: Path) -> None:
    """GPU-b fails on gpu017 in October, comes back in gpu044 in November; GPU-a stays put."""
    docs = [
        report("gpu017", "2026-10-02T09:00:00Z", [gpu(0, "GPU-a", "S-a"), gpu(1, "GPU-b", "S-b")], xid_on="GPU-b"),
        report("gpu017", "2026-10-20T09:00:00Z", [gpu(0, "GPU-a", "S-a"), gpu(1, "GPU-c", "S-c")]),
        report("gpu044", "2026-11-30T09:00:00Z", [gpu(0, "GPU-d", "S-d"), gpu(1, "GPU-b", "S-b")]),
    ]
    history.ingest(db, [record(d) for d in docs])


def test_a_gpu_that_failed_and_is_back_in_service_elsewhere_is_flagged(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    fleet_history(db)
    events = history.gpu_events(db, ["GPU-a", "GPU-b", "GPU-c", "GPU-d"])
    assert [(e.kind, e.uuid, e.previous_host, e.host) for e in events] == [
        ("returned", "GPU-b", "gpu017", "gpu044"),
        ("moved", "GPU-b", "gpu017", "gpu044"),
    ]
    assert events[0].message == "GPU-b failed on 2026-10-02 on gpu017 (nvml.xid), now in gpu044"
    assert events[0].to_dict()["gpu_serial"] == "S-b"
    assert history.gpu_events(db, ["GPU-a"]) == []  # healthy and never moved: nothing to say
    assert history.gpu_events(tmp_path / "none.sqlite", ["GPU-b"]) == []


def test_a_gpu_failing_again_now_is_not_back_in_service() -> None:
    seen = [
        records.Sighting("GPU-x", None, "n1", "2026-10-01T00:00:00.000000Z", "not certified", True, ("nvml.xid",)),
        records.Sighting("GPU-x", None, "n1", "2026-11-01T00:00:00.000000Z", "not certified", True, ("nvml.xid",)),
    ]
    assert records.events_of(seen) == []
    assert records.events_of(seen[:1]) == []  # seen once: no history to compare with


def test_the_timeline_by_uuid_serial_and_host(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    fleet_history(db)
    kind, rows = history.timeline(db, "S-b")
    assert kind == "gpu" and [(r.host, r.gpu_failed) for r in rows] == [("gpu017", True), ("gpu044", False)]
    kind, rows = history.timeline(db, "gpu017")
    assert kind == "host" and len(rows) == 4 and {r.uuid for r in rows} == {"GPU-a", "GPU-b", "GPU-c"}
    assert history.timeline(db, "GPU-zzz") == ("none", [])


def test_fleet_history_prints_the_timeline_and_exits_2_for_an_unknown_key(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    fleet_history(db)
    shown = run_gpuenv("fleet", "history", "GPU-b", "--history", str(db))
    assert shown.returncode == 0, shown.stderr
    assert "gpu017" in shown.stdout and "gpu044" in shown.stdout and "FAILED nvml.xid" in shown.stdout
    as_json = json.loads(run_gpuenv("fleet", "history", "gpu044", "--history", str(db), "--json").stdout)
    assert as_json["kind"] == "host" and {r["gpu"]["uuid"] for r in as_json["rows"]} == {"GPU-b", "GPU-d"}
    missing = run_gpuenv("fleet", "history", "GPU-zzz", "--history", str(db))
    assert missing.returncode == 2 and "GPU-zzz is not in the history" in missing.stderr
    assert "hint: gpuenv fleet history --list" in missing.stderr
    absent = run_gpuenv("fleet", "history", "GPU-b", "--history", str(tmp_path / "nope.sqlite"))
    assert absent.returncode == 2 and absent.stderr.startswith("gpuenv: error: no history at")
    assert not (tmp_path / "nope.sqlite").exists()


def test_a_file_that_is_not_a_history_is_a_bad_request(tmp_path: Path) -> None:
    bogus = tmp_path / "h.sqlite"
    bogus.write_text("not sqlite at all " * 100)
    with pytest.raises(BadRequest, match="is not a gpuenv history"):
        history.ingest(bogus, [])


def test_a_network_filesystem_is_refused() -> None:
    mounts = "/dev/sda1 / ext4 rw 0 0\nserver:/export /mnt/shared nfs4 rw 0 0\n"
    assert history.filesystem_of(Path("/mnt/shared/gpuenv"), mounts) == "nfs4"
    assert history.filesystem_of(Path("/mnt/sharedother"), mounts) == "ext4"
    assert config.history_file({"XDG_STATE_HOME": "/s"}) == Path("/s/gpuenv/history.sqlite")
    assert config.history_file({"HOME": "/home/u"}) == Path("/home/u/.local/state/gpuenv/history.sqlite")


def test_fleet_report_records_its_reports_and_flags_the_returning_gpu(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    october, november = tmp_path / "oct", tmp_path / "nov"
    for folder, doc in (
        (
            october,
            report("gpu017", "2026-10-02T09:00:00Z", [gpu(0, "GPU-a", "S-a"), gpu(1, "GPU-b", "S-b")], xid_on="GPU-b"),
        ),
        (november, report("gpu044", "2026-11-30T09:00:00Z", [gpu(0, "GPU-d", "S-d"), gpu(1, "GPU-b", "S-b")])),
    ):
        folder.mkdir()
        (folder / f"{doc['host']['hostname']}.json").write_bytes(raw(doc))
    first = run_gpuenv("fleet", "report", str(october), "--history", str(db), "--json")
    assert first.returncode == 1 and json.loads(first.stdout)["events"] == []  # a failed host: exit 1
    run_gpuenv("fleet", "report", str(october), "--history", str(db))  # the same report again: no new row
    later = run_gpuenv("fleet", "report", str(november), "--history", str(db), "--json")
    events = json.loads(later.stdout)["events"]
    assert [e["message"] for e in events] == [
        "GPU-b failed on 2026-10-02 on gpu017 (nvml.xid), now in gpu044",
        "GPU-b moved from gpu017 (last seen 2026-10-02) to gpu044",
    ]
    shown = run_gpuenv("fleet", "report", str(november), "--history", str(db))
    assert "history: GPU-b failed on 2026-10-02 on gpu017 (nvml.xid), now in gpu044" in shown.stdout
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM reports").fetchone() == (2,)
    quiet = run_gpuenv("fleet", "report", str(november), "--no-history", "--json")
    assert json.loads(quiet.stdout)["events"] == []
