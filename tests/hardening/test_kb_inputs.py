"""The knowledge base's inputs (--data, a `kb refresh --from` snapshot) are read by the one input rule:
a regular file, size-capped, never waited on, its schema checked before any row is read; anything
else is exit 2 naming the file (and the field), through the real CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import run_gpuenv


def hostile(tmp_path: Path, kind: str, name: str) -> Path:
    path = tmp_path / name
    if kind == "fifo":
        os.mkfifo(path)  # nobody writes it: opening it to read would wait forever
    elif kind == "zero":
        path.symlink_to("/dev/zero")  # reads without end
    else:
        path.write_text("{}\n")  # JSON, but no knowledge base
    return path


def bad_request(out: object, *needles: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr)  # type: ignore[attr-defined]
    err = out.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in err and "crashed" not in err and err.startswith("gpuenv: error: "), err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize(
    ("kind", "needle"), [("fifo", "not a regular file"), ("zero", "not a regular file"), ("empty", "schema")]
)
def test_a_hostile_data_file_is_a_bad_request_naming_it(tmp_path: Path, kind: str, needle: str) -> None:
    data = hostile(tmp_path, kind, "compat.json")
    bad_request(run_gpuenv("--data", str(data), "resolve", "--cuda", "12.4", timeout=30), str(data), needle)


@pytest.mark.parametrize(
    ("kind", "needle"), [("fifo", "not a regular file"), ("zero", "not a regular file"), ("empty", "'recorded'")]
)
def test_a_hostile_snapshot_info_is_a_bad_request_naming_it(tmp_path: Path, kind: str, needle: str) -> None:
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    info = hostile(snapshot, kind, "snapshot.json")
    out = tmp_path / "kb.json"
    bad_request(run_gpuenv("kb", "refresh", "--from", str(snapshot), "-o", str(out), timeout=30), str(info), needle)
    assert not out.exists()


def test_kb_refresh_checks_the_knowledge_base_in_use_before_reading_its_rows(tmp_path: Path) -> None:
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    (snapshot / "snapshot.json").write_text('{"recorded": "2026-11-30"}')
    data = hostile(tmp_path, "empty", "compat.json")
    out = run_gpuenv("--data", str(data), "kb", "refresh", "--from", str(snapshot), "-o", str(tmp_path / "kb.json"))
    bad_request(out, str(data), "schema")


def test_a_snapshot_file_that_is_a_device_is_not_read_without_end(tmp_path: Path) -> None:
    from gpuenv.kb.sources import Request, SnapshotFetcher

    (tmp_path / "pypi" / "pypi" / "torch").mkdir(parents=True)
    big = tmp_path / "pypi" / "pypi" / "torch" / "json"
    with big.open("wb") as handle:
        handle.truncate(65 * (1 << 20))  # sparse: larger than any index page
    with pytest.raises(Exception, match="larger than 64 MiB"):
        SnapshotFetcher(tmp_path).get(Request("pypi", "pypi/torch/json"))
