"""The GPU history in the open: fleet report says where it records, records a report once however often it
is read (by content, whatever the file is called), and `fleet history --list` shows what it holds."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from gpuenv.fleet import history
from tests.conftest import run_gpuenv
from tests.fleet import fleet_reports as fr
from tests.fleet.test_history import fleet_history


def reports_held(db: Path) -> int:
    with sqlite3.connect(db) as connection:
        return int(connection.execute("SELECT count(*) FROM reports").fetchone()[0])


def test_fleet_report_says_where_it_records_and_records_each_report_once(tmp_path: Path) -> None:
    folder, db = fr.write(fr.fleet(6), tmp_path / "reports"), tmp_path / "h.sqlite"
    first = run_gpuenv("fleet", "report", str(folder), "--history", str(db))
    assert first.returncode == 0, first.stderr
    made = f"made the GPU history {db} and recorded 6 report(s) there (--no-history: none)"
    assert first.stderr.splitlines() == [made]
    shutil.copy(folder / "gpu0000.json", folder / "gpu0000-copy.json")  # the same report under another name
    again = run_gpuenv("fleet", "report", str(folder), "--history", str(db))
    assert again.stderr.splitlines()[0].startswith("recorded 0 new report(s)")
    assert reports_held(db) == 6
    quiet = run_gpuenv("fleet", "report", str(folder), "--no-history")
    assert "GPU history" not in quiet.stderr


def test_fleet_history_lists_hosts_and_gpus(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    fleet_history(db)
    shown = run_gpuenv("fleet", "history", "--list", "--history", str(db))
    assert shown.returncode == 0, shown.stderr
    assert "gpu017" in shown.stdout and "gpu044" in shown.stdout and "GPU-b" in shown.stdout
    assert "2 host(s) (0 not certified last), 4 GPU(s); 1 failed or have events; newest report 2026-11-30" in (
        shown.stdout
    )
    assert max(g.last_seen for g in history.listing(db)[1]).startswith("2026-11-30")
    listed = json.loads(run_gpuenv("fleet", "history", "--list", "--history", str(db), "--json").stdout)
    hosts = {h["host"]: h for h in listed["hosts"]}
    assert hosts["gpu017"]["reports"] == 2 and hosts["gpu017"]["last_seen"].startswith("2026-10-20")
    assert hosts["gpu044"]["events"] == 2  # GPU-b came back there after failing on gpu017, and moved
    gpu_b = next(g for g in listed["gpus"] if g["uuid"] == "GPU-b")
    assert (gpu_b["host"], gpu_b["reports"], gpu_b["failed"], gpu_b["events"]) == ("gpu044", 2, 1, 2)


def test_fleet_history_needs_a_key_or_list(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    fleet_history(db)
    for args in ((), ("GPU-b", "--list")):
        done = run_gpuenv("fleet", "history", *args, "--history", str(db))
        assert done.returncode == 2 and "hint: gpuenv fleet history --list" in done.stderr
    unknown = run_gpuenv("fleet", "history", "nosuchhost", "--history", str(db), "--json")
    assert unknown.returncode == 2 and unknown.stdout == ""
