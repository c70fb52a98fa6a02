"""What a new user trips on, round 2: state written where nobody said, metrics that lose their
host, a report from the future nobody names, an output that reaches an input through a link, a
history path that is no file. Each through the CLI, as a user runs it."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import gpuenv_main, run_gpuenv
from tests.fleet import fleet_reports as fr

SNAPSHOT = Path(__file__).resolve().parent.parent / "data" / "kb-snapshot"


def reports(tmp_path: Path, n: int = 3) -> Path:
    return fr.write(fr.fleet(n), tmp_path / "reports")


# --- the GPU history: where it is, and what it may be -----------------------------------------------


def test_the_first_fleet_report_says_once_where_it_made_the_history(tmp_path: Path) -> None:
    folder = reports(tmp_path)
    state = {"XDG_STATE_HOME": str(tmp_path / "state")}
    history = tmp_path / "state" / "gpuenv" / "history.sqlite"
    first = run_gpuenv("fleet", "report", str(folder), "--json", env=state)
    assert first.returncode == 0 and history.is_file(), first.stderr
    said = [line for line in first.stderr.splitlines() if str(history) in line]
    assert len(said) == 1 and said[0].startswith(f"made the GPU history {history}"), first.stderr
    again = run_gpuenv("fleet", "report", str(folder), "--json", env=state)
    assert [line for line in again.stderr.splitlines() if "GPU history" in line] == [
        f"recorded 0 new report(s) in the GPU history {history} (--no-history: none)"
    ]


@pytest.mark.parametrize("kind", ["character device", "FIFO"])
def test_a_history_that_is_no_regular_file_is_refused_before_sqlite_opens_it(tmp_path: Path, kind: str) -> None:
    """/dev/null, a FIFO: SQLite would wait (its 120 s busy timeout on a device another process holds
    a lock on; for ever on a FIFO). Refused at once, exit 2. (A folder Click refuses itself.)"""
    folder = reports(tmp_path)
    target = Path("/dev/null") if kind == "character device" else tmp_path / "fifo"
    if kind == "FIFO":
        os.mkfifo(target)
    start = time.monotonic()
    for args in (("fleet", "report", str(folder)), ("fleet", "history", "--list")):
        result = run_gpuenv(*args, "--history", str(target), timeout=30)
        assert result.returncode == 2, result.stderr
        assert f"--history {target} is a {kind}, not a regular file" in result.stderr
    assert time.monotonic() - start < 20


# --- outputs: metrics keep their host -----------------------------------------------------------


def test_every_verify_metric_with_a_host_label_has_the_same_one(tmp_path: Path) -> None:
    """gpuenv_verify_exit_code carries the host its sibling gpuenv_verify_certified carries."""
    prom = tmp_path / "verify.prom"
    result = run_gpuenv("verify", "--check", "nvml", "--passive", "--prometheus", str(prom))
    assert result.returncode in (0, 1, 3), result.stderr  # whatever NVML says here: the file is written
    verdict = ("gpuenv_verify_certified{", "gpuenv_verify_exit_code{")
    samples = [line for line in prom.read_text().splitlines() if line.startswith(verdict)]
    hosts = {line.split('host="')[1].split('"')[0] if 'host="' in line else None for line in samples}
    assert len(samples) == 2 and len(hosts) == 1 and None not in hosts, samples


# --- a report from the future -------------------------------------------------------------------


def _future(folder: Path) -> None:
    """gpu0001 also has a report dated 2099: its real one wins, and the file claiming the future is named."""
    doc = json.loads((folder / "gpu0001.json").read_text())
    doc["started"] = "2099-01-01T00:00:00+00:00"
    (folder / "gpu0001-2099.json").write_text(json.dumps(doc))


def test_a_report_dated_2099_is_named_by_every_reader(tmp_path: Path) -> None:
    folder = reports(tmp_path, 5)
    _future(folder)
    state = {"XDG_STATE_HOME": str(tmp_path / "state")}
    fleet = run_gpuenv("fleet", "report", "--json", str(folder), env=state)
    host = next(h for h in json.loads(fleet.stdout)["hosts"] if h["host"] == "gpu0001")
    assert host["started"].startswith("2026") and "gpu0001-2099.json is dated 2099" in host["flags"][0]
    learned = run_gpuenv("fleet", "baseline", "learn", str(folder), "--min-hosts", "1", "-o", str(tmp_path / "b.json"))
    assert learned.returncode == 0 and "gpu0001-2099.json is dated 2099-01-01" in learned.stderr, learned.stderr
    listed = run_gpuenv("fleet", "history", "--list", env=state)
    assert "future-dated reports (ahead of this machine's clock) from gpu0001" in listed.stdout, listed.stdout
    as_json = json.loads(run_gpuenv("fleet", "history", "--list", "--json", env=state).stdout)
    assert {h["host"]: h["future_dated"] for h in as_json["hosts"]} == {f"gpu{i:04d}": int(i == 1) for i in range(5)}


# --- an output that is an input, however reached ------------------------------------------------


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_a_link_named_otherwise_to_an_input_report_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], link: str
) -> None:
    """`--prometheus fleet.prom` where fleet.prom reaches reports/gpu0001.json: refused, nothing overwritten."""
    folder = reports(tmp_path)
    victim = folder / "gpu0001.json"
    before = victim.read_bytes()
    out = tmp_path / "fleet.prom"
    out.symlink_to(victim) if link == "symlink" else os.link(victim, out)
    for flag in ("--prometheus", "--html"):
        assert gpuenv_main("fleet", "report", "--no-history", str(folder), flag, str(out)) == 2
        assert f"{flag} {out} is one of the inputs ({folder})" in capsys.readouterr().err
    assert gpuenv_main("fleet", "baseline", "learn", str(folder), "-o", str(out)) == 2
    assert victim.read_bytes() == before and out.read_bytes() == before


def test_an_output_that_is_the_history_or_another_output_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = reports(tmp_path)
    history = tmp_path / "history.sqlite"
    assert gpuenv_main("fleet", "report", "--history", str(history), str(folder)) == 0
    kept = history.read_bytes()
    link = tmp_path / "h.prom"
    link.symlink_to(history)
    assert gpuenv_main("fleet", "report", "--history", str(history), str(folder), "--prometheus", str(link)) == 2
    assert "is one of the inputs" in capsys.readouterr().err and history.read_bytes() == kept
    same = tmp_path / "fleet.out"
    args = ("fleet", "report", "--no-history", str(folder), "--prometheus", str(same), "--html", str(same))
    assert gpuenv_main(*args) == 2
    assert f"--prometheus {same} and --html {same} are the same file" in capsys.readouterr().err
    assert not same.exists()


@pytest.mark.parametrize("flag", ["--report", "--junit", "--prometheus"])
def test_a_verify_output_that_reaches_its_policy_or_baseline_is_refused(tmp_path: Path, flag: str) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text('{"schema": "gpuenv.nvml-policy/1"}\n')
    kept = policy.read_bytes()
    link = tmp_path / "out.xml"
    link.symlink_to(policy)
    result = run_gpuenv("verify", "--check", "nvml", "--passive", "--policy", str(policy), flag, str(link))
    assert result.returncode == 2 and f"{flag} {link} is one of the inputs ({policy})" in result.stderr
    assert policy.read_bytes() == kept and result.stdout == ""
    out = tmp_path / "verify.out"
    twice = run_gpuenv("verify", "--check", "nvml", "--passive", "--report", str(out), flag, str(out))
    if flag != "--report":
        assert twice.returncode == 2 and f"{flag} {out} and --report {out} are the same file" in twice.stderr
        assert not out.exists()


def test_kb_refresh_never_writes_over_its_snapshot(tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot"
    shutil.copytree(SNAPSHOT, snapshot)
    victim = next(p for p in sorted(snapshot.rglob("*.json")))
    before = victim.read_bytes()
    link = tmp_path / "new-kb.json"
    link.symlink_to(victim)
    result = run_gpuenv("kb", "refresh", "--from", str(snapshot), "-o", str(link))
    assert result.returncode == 2 and "--output" in result.stderr and "is one of the inputs" in result.stderr
    assert victim.read_bytes() == before
