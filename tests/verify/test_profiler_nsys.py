"""An nsys capture that overruns its timeout ends nsys and the profiled python with it."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from gpuenv.verify.checks import profiler

FAKE_NSYS = """#!/bin/sh
# drop `profile --force-overwrite true --trace cuda --output X`, start the command in a session of its own
shift 7
setsid "$@" &
echo $! > "{pidfile}"
sleep 300
"""


def test_an_nsys_timeout_kills_the_profiled_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pidfile = tmp_path / "python.pid"
    nsys = tmp_path / "nsys"
    nsys.write_text(FAKE_NSYS.format(pidfile=pidfile))
    nsys.chmod(nsys.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(profiler, "NSYS_TIMEOUT", 2)
    monkeypatch.setattr(profiler, "NSYS_WORK", "import time; time.sleep(300)")
    started = time.monotonic()
    result = profiler.nsys_capture(tmp_path / "capture")
    assert not result["ok"] and "no result within 2 s" in result["error"]
    assert time.monotonic() - started < 30
    python = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(python):
        time.sleep(0.1)
    assert not _alive(python)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
