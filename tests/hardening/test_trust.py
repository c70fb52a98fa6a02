"""Trust the verdict (fleet report): a report from the future, a report that does not match its schema,
a hostile file among the reports and an output aimed at an input never make a bad fleet look healthy,
hide the other hosts or destroy a report; through the real CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import gpuenv_main, run_gpuenv
from tests.fleet import fleet_reports as fr


def fleet_folder(tmp_path: Path, n: int = 3) -> tuple[Path, list[fr.Node]]:
    nodes = fr.fleet(n)
    return fr.write(nodes, tmp_path / "reports"), nodes


def report_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code = gpuenv_main("fleet", "report", "--no-history", "--json", *args)
    out = capsys.readouterr()
    return code, json.loads(out.out) if out.out else {}, out.err


# --- item 3: a report dated ahead of the clock ----------------------------------------------------


def test_a_future_dated_pass_never_hides_todays_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, nodes = fleet_folder(tmp_path)
    fr.ecc_failure(nodes[0], 1)
    failing = fr.report(nodes[0])
    failing["started"] = "2026-01-01T00:00:00+00:00"  # an older run that failed (not ahead of any clock)
    (folder / "gpu0000.json").write_text(json.dumps(failing))
    future = fr.report(fr.fleet(1)[0])
    future["started"] = "2099-01-01T00:00:00+00:00"
    (tmp_path / "future.json").write_text(json.dumps(future))
    code, data, _ = report_json(capsys, str(folder), str(tmp_path / "future.json"))
    assert code == 1 and data["healthy"] is False
    host = next(h for h in data["hosts"] if h["host"] == "gpu0000")
    assert host["outcome"] == "not certified" and "ahead of this machine's clock" in host["flags"][0]


def test_a_host_with_only_a_future_report_is_not_certified_and_the_skew_is_configurable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, nodes = fleet_folder(tmp_path)
    soon = fr.report(nodes[0])
    soon["started"] = "2099-01-01T00:00:00+00:00"
    (folder / "gpu0000.json").write_text(json.dumps(soon))
    code, data, _ = report_json(capsys, str(folder))
    assert code == 1 and data["outcomes"]["future-dated report"] == 1
    assert gpuenv_main("fleet", "report", "--no-history", "--clock-skew", "nan", str(folder)) == 2
    assert "--clock-skew" in capsys.readouterr().err
    config = tmp_path / "gpuenv.toml"
    config.write_text('[fleet.report]\nclock-skew = "inf"\n')
    assert gpuenv_main("--config", str(config), "fleet", "report", "--no-history", str(folder)) == 2
    config.write_text("[fleet.report]\nclock-skew = 1e309\n")
    assert gpuenv_main("--config", str(config), "fleet", "report", "--no-history", str(folder)) == 2
    assert "clock-skew" in capsys.readouterr().err


# --- item 5: a report that does not match its schema ---------------------------------------------


@pytest.mark.parametrize(
    ("where", "value", "field"),
    [
        (("checks", 1, "duration_s"), "fast", "$.checks[1].duration_s"),
        (("host", "gpus", 0, "index"), "0", "$.host.gpus[0].index"),
        (("verdict", "certified"), "yes", "$.verdict.certified"),
    ],
)
def test_a_report_with_strings_for_numbers_is_unreadable_named_and_not_healthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: tuple[Any, ...], value: Any, field: str
) -> None:
    folder, nodes = fleet_folder(tmp_path)
    data = fr.report(nodes[2])
    node: Any = data
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    (folder / "gpu0002.json").write_text(json.dumps(data))
    code, out, err = report_json(capsys, str(folder))
    assert code == 1 and out["healthy"] is False
    assert "gpu0002" not in [h["host"] for h in out["hosts"]]
    assert "gpu0002.json: corrupt: malformed" in err and field in err
    assert [s["claims_report"] for s in out["skipped"]] == [True]


def test_a_file_that_is_no_gpuenv_report_is_still_only_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = fleet_folder(tmp_path, 8)  # enough hosts that every group is judged
    (folder / "inventory.json").write_text('{"all": {"hosts": []}}')
    (folder / "package.json").write_text('{"schema": "https://json.schemastore.org/package"}')
    code, out, err = report_json(capsys, str(folder))
    assert code == 0 and out["healthy"] is True and "skipped" in err
    assert [s["claims_report"] for s in out["skipped"]] == [False, False]


def test_the_history_and_the_slurm_verdict_take_a_malformed_report_as_unreadable(tmp_path: Path) -> None:
    from gpuenv.fleet.history import ingest_files
    from gpuenv.verify.reportfile import UNREADABLE, verdict_of

    data = fr.report(fr.fleet(1)[0])
    data["checks"][0]["duration_s"] = "slow"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    assert verdict_of(path) == (UNREADABLE, None)
    result, skipped = ingest_files(tmp_path / "h.sqlite", [(path, None)])
    assert result.added == 0 and "$.checks[0].duration_s" in skipped[0]


# --- item 6: one hostile file does not end the fleet report ---------------------------------------


@pytest.mark.parametrize("nan", [False, True], ids=["msgspec", "json-fallback"])
def test_deep_nesting_makes_one_host_unreadable_not_the_whole_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nan: bool
) -> None:
    folder, nodes = fleet_folder(tmp_path)
    data = fr.report(nodes[1])
    if nan:
        data["checks"][0]["metrics"]["note"] = float("nan")  # read by the slower json path
    text = json.dumps(data).replace('"metrics": {', '"metrics": {"deep": ' + "[" * 200_000 + "]" * 200_000 + ", ", 1)
    (folder / "gpu0001.json").write_text(text)
    history = tmp_path / "history.sqlite"
    code = gpuenv_main("fleet", "report", "--json", "--history", str(history), str(folder))
    out = capsys.readouterr()
    assert code == 1, out.err
    data = json.loads(out.out)
    assert sorted(h["host"] for h in data["hosts"]) == ["gpu0000", "gpu0002"]
    assert "gpu0001.json: corrupt: nested too deeply" in out.err


def test_a_non_string_gpu_uuid_with_the_history_on_is_one_unreadable_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, nodes = fleet_folder(tmp_path)
    for i, node in enumerate(nodes[:2]):
        data = fr.report(node)
        data["host"]["gpus"][0]["uuid"] = [12345] if i else 12345
        data["checks"][0]["metrics"]["note"] = float("nan") if i else 1.0  # both readers
        (folder / f"{node.host}.json").write_text(json.dumps(data))
    code = gpuenv_main("fleet", "report", "--json", "--history", str(tmp_path / "h.sqlite"), str(folder))
    out = capsys.readouterr()
    assert code == 1, out.err
    assert [h["host"] for h in json.loads(out.out)["hosts"]] == ["gpu0002"]
    assert out.err.count("$.host.gpus[0].uuid") == 2


# --- item 10: outputs -------------------------------------------------------------------------------


def test_a_write_error_is_a_clean_exit_3_naming_the_file(tmp_path: Path) -> None:
    folder, _ = fleet_folder(tmp_path)
    fifo = tmp_path / "nobody-reads.prom"
    os.mkfifo(fifo)
    out = run_gpuenv("fleet", "report", "--no-history", str(folder), "--prometheus", str(fifo))
    assert out.returncode == 3 and "crashed" not in out.stderr, out.stderr
    assert f"--prometheus {fifo}" in out.stderr and "Traceback" not in out.stderr
    if Path("/dev/full").exists():
        out = run_gpuenv("fleet", "report", "--no-history", str(folder), "--prometheus", "/dev/full")
        assert out.returncode == 3 and "crashed" not in out.stderr, out.stderr
        assert "/dev/full" in out.stderr and "No space left" in out.stderr


@pytest.mark.parametrize("how", ["direct", "symlink", "inside-folder"])
@pytest.mark.parametrize("flag", ["--prometheus", "--html", "learn-o"])
def test_an_output_that_is_one_of_the_inputs_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str, flag: str
) -> None:
    folder, _ = fleet_folder(tmp_path)
    victim = folder / "gpu0001.json"
    before = victim.read_bytes()
    target = victim
    if how == "symlink":
        target = tmp_path / "out.json"
        target.symlink_to(victim)
    inputs = [str(folder)] if how == "inside-folder" else [str(folder / "gpu0000.json"), str(victim)]
    if flag == "learn-o":
        args = ["fleet", "baseline", "learn", *inputs, "--min-hosts", "1", "-o", str(target)]
    else:
        args = ["fleet", "report", "--no-history", *inputs, flag, str(target)]
    assert gpuenv_main(*args) == 2
    assert "is one of the inputs" in capsys.readouterr().err
    assert victim.read_bytes() == before


# --- item 7: the GPU history is gpuenv's own file ---------------------------------------------------


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize(
    "schema",
    [
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)",
        "CREATE TABLE reports (id INTEGER PRIMARY KEY, body TEXT)",  # a name gpuenv uses, other columns
        "PRAGMA application_id=1234",
        "PRAGMA user_version=7",
    ],
)
def test_a_foreign_sqlite_file_as_the_history_is_refused_and_left_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], schema: str
) -> None:
    import sqlite3

    folder, _ = fleet_folder(tmp_path)
    store = tmp_path / "store"
    store.mkdir()
    foreign = store / "app.db"
    with sqlite3.connect(foreign) as db:
        db.execute(schema)
    db.close()
    before = _snapshot(store)
    assert gpuenv_main("fleet", "report", str(folder), "--history", str(foreign)) == 2
    assert f"{foreign} is not a gpuenv history" in capsys.readouterr().err
    assert _snapshot(store) == before  # no table, no journal mode, no -wal or -shm beside it
    assert gpuenv_main("fleet", "history", "GPU-x", "--history", str(foreign)) == 2
    assert _snapshot(store) == before


def test_a_history_is_stamped_and_one_made_before_the_stamp_is_still_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    from gpuenv.fleet import history

    folder, nodes = fleet_folder(tmp_path)
    fresh, legacy = tmp_path / "fresh.sqlite", tmp_path / "legacy.sqlite"
    with sqlite3.connect(legacy) as db:  # what gpuenv made before it stamped its histories
        for statement in filter(str.strip, history._TABLES.split(";")):
            db.execute(statement)
        db.execute("PRAGMA user_version=1")
    db.close()
    for path in (fresh, legacy):
        assert gpuenv_main("fleet", "report", str(folder), "--history", str(path)) == 0
        capsys.readouterr()
        with sqlite3.connect(path) as db:
            stamp = db.execute("PRAGMA application_id").fetchone()[0]
            count = db.execute("SELECT count(*) FROM reports").fetchone()[0]
        db.close()
        assert (stamp, count) == (history.APPLICATION_ID, len(nodes))
    assert gpuenv_main("fleet", "history", nodes[0].uuid(0), "--history", str(legacy), "--json") == 0


# --- item 13: escape sequences in names reach no terminal and no Markdown raw ----------------------

HOSTILE = "gpu\x1b[2J\x1b]0;owned\x07\nfleet healthy\r"


def test_escape_sequences_in_host_gpu_and_file_names_are_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, nodes = fleet_folder(tmp_path)
    nodes[0].host, nodes[0].model = HOSTILE, f"H100{HOSTILE}"
    fr.ecc_failure(nodes[0], 1)  # the host named in the failing findings' table too
    (folder / "gpu0000.json").write_text(json.dumps(fr.report(nodes[0])))
    (folder / "cut\x1b[31m.json").write_text('{"schema": "gpuenv.verify-report/2", "checks": 1}')
    for fmt in ((), ("--markdown",)):
        gpuenv_main("fleet", "report", "--no-history", str(folder), *fmt)
        out = capsys.readouterr()
        for text in (out.out, out.err):
            assert "\x1b" not in text and "\x07" not in text and "\r" not in text, text
        assert "\\x1b[2J" in out.out and "\\x1b]0;owned\\x07\\nfleet healthy\\r" in out.out
    gpuenv_main("fleet", "report", "--no-history", "--json", str(folder))
    data = json.loads(capsys.readouterr().out)
    assert HOSTILE in [h["host"] for h in data["hosts"]]  # JSON keeps the exact name


def test_the_verify_table_escapes_the_names_it_shows() -> None:
    from gpuenv.cli.output import console, draw
    from gpuenv.output import screen
    from gpuenv.verify.model import CheckResult, Report, decide

    checks = [CheckResult("nvml", "pass", summary=f"8x {HOSTILE}")]
    report = Report(
        level="quick",
        device="cuda",
        cpu_only=False,
        started="2026-11-30T15:04:05+00:00",
        finished="2026-11-30T15:04:06+00:00",
        gpuenv_version="0",
        host={"hostname": HOSTILE, "gpus": []},
        stack={},
        checks=checks,
        verdict=decide(checks, strict=False, cpu_only=False, interrupted=None),
    )
    out = console()
    with out.capture() as captured:
        draw(screen("verify", report), out)
    text = captured.get()
    assert "\x1b]" not in text and "\x07" not in text and "\\x1b[2J" in text
