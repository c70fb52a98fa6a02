"""`gpuenv tune power --restore` trusts only a state file it owns: through the real CLI, without NVML.

Root puts back the limits the file holds, so a file someone else could have planted (a symlink, a file
others may write, another user's file) or one that is not a state gpuenv wrote (a FIFO, NaN, Infinity,
1e400) is a bad request, exit 2, said in one line naming the file and why; no limit is set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpuenv.power import service
from tests.conftest import gpuenv_main, run_gpuenv

STATE: dict[str, Any] = {
    "schema": "gpuenv.power-state/1",
    "phase": "applied",
    "pid": 1,
    "started": "2026-11-30T20:00:00+00:00",
    "gpus": [{"index": 0, "uuid": "GPU-0", "original_mw": 700000, "applied_mw": 450000}],
}


@pytest.fixture
def no_limit_is_set(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """NVML as the restore would reach it: any use is recorded (a refused file must not get there)."""
    reached: list[str] = []

    def nvml() -> Any:
        reached.append("nvml")
        raise AssertionError("the restore reached NVML")

    monkeypatch.setattr(service, "_control", nvml)
    return reached


def _state(path: Path, text: str | None = None, *, mode: int = 0o644) -> Path:
    path.write_text(json.dumps(STATE) if text is None else text)
    path.chmod(mode)
    return path


def _refused(path: Path, capsys: pytest.CaptureFixture[str], reached: list[str]) -> str:
    code = gpuenv_main("tune", "power", "--restore", "--state-file", str(path))
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("gpuenv: error: power state file") and str(path) in lines[0]
    assert lines[1].startswith("  hint:") and reached == []
    return lines[0]


def test_a_symlinked_state_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_limit_is_set: list[str]
) -> None:
    link = tmp_path / "power-state.json"
    link.symlink_to(_state(tmp_path / "planted.json"))
    assert "is a symlink" in _refused(link, capsys, no_limit_is_set)


@pytest.mark.parametrize("mode", [0o666, 0o664, 0o646])
def test_a_state_file_others_may_write_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_limit_is_set: list[str], mode: int
) -> None:
    path = _state(tmp_path / "power-state.json", mode=mode)
    assert f"may be written by others (mode {mode:04o})" in _refused(path, capsys, no_limit_is_set)


def test_another_users_state_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_limit_is_set: list[str]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    path = _state(tmp_path / "power-state.json")
    os.chown(path, 65534, 65534)
    assert "belongs to another user (uid 65534" in _refused(path, capsys, no_limit_is_set)


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("gpus[0].original_mw", "Infinity"),
        ("gpus[0].original_mw", "1e400"),
        ("gpus[0].applied_mw", "NaN"),
        ("pid", "-Infinity"),
    ],
)
def test_a_number_that_is_not_finite_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_limit_is_set: list[str], field: str, text: str
) -> None:
    key = field.rsplit(".", 1)[-1]
    body = json.dumps(STATE).replace(f'"{key}": {STATE["gpus"][0].get(key, 1)}', f'"{key}": {text}')
    assert text in body
    path = _state(tmp_path / "power-state.json", body)
    assert f"{field}: not a finite number" in _refused(path, capsys, no_limit_is_set)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"pid": 1.5}, "pid: expected a whole number"),
        ({"gpus": [{"index": 0, "original_mw": 1e12}]}, "gpus[0].original_mw: expected a whole number"),
        ({"gpus": [{"index": True, "original_mw": 700000}]}, "gpus[0].index: expected a whole number"),
        ({"gpus": [{"index": 0, "uuid": 7, "original_mw": 700000}]}, "gpus[0].uuid: expected a string"),
    ],
)
def test_a_state_gpuenv_did_not_write_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_limit_is_set: list[str], change: dict[str, Any], needle: str
) -> None:
    path = _state(tmp_path / "power-state.json", json.dumps({**STATE, **change}))
    assert needle in _refused(path, capsys, no_limit_is_set)


def test_a_fifo_in_place_of_the_state_file_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "power-state.json"
    os.mkfifo(fifo, 0o600)
    for args in (("--restore",), ("--device", "cpu")):  # tune itself reads the file first too
        proc = run_gpuenv("tune", "power", *args, "--state-file", str(fifo), timeout=30)
        assert proc.returncode == 2, proc.stderr
        assert "is not a regular file" in proc.stderr and "Traceback" not in proc.stderr
