"""What a new user met in their first verify runs, with real PyTorch on the CPU: the fix offered on a
machine without a GPU works there, a log hears what starts while torch loads, and a signal after the
checks leaves the verdict, the exit code and the report saying the same."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuenv.verify.pci import TEST_SYSFS_ENV
from tests.conftest import run_gpuenv

pytestmark = pytest.mark.cpu  # real torch in child processes: nox -s cpu


def test_the_fix_offered_on_a_machine_without_a_gpu_works_there(tmp_path: Path) -> None:
    (tmp_path / "bus").mkdir()
    gpu_less = {TEST_SYSFS_ENV: str(tmp_path / "bus"), "LD_LIBRARY_PATH": ""}
    refused = run_gpuenv("verify", "--device", "cuda", "--json", env=gpu_less)
    fix = json.loads(refused.stdout)["checks"][0]["findings"][0]["remediation"]
    offered = fix.split("gpuenv verify ", 1)[1].split(";", 1)[0].split()  # ["--device", "cpu"]
    assert offered == ["--device", "cpu"], fix
    proc = run_gpuenv("verify", *offered, "--check", "stack", env=gpu_less, timeout=300)  # one check keeps it short
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "certified (CPU only) (1 pass)"


def test_a_log_hears_what_starts_before_torch_has_loaded() -> None:
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuenv", "verify", "--device", "cpu", "--check", "stack"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    arrived = [(time.monotonic() - started, line.rstrip("\n")) for line in proc.stdout]
    proc.wait(timeout=300)
    assert proc.returncode == 0, arrived
    lines = [text for _, text in arrived]
    assert lines[0].startswith("gpuenv verify --level quick on ")
    assert lines[1] == "  starting the checks' process: Python, then torch (a few seconds)"
    assert lines[2].startswith("  stack      pass ") and len(lines) == 4
    assert arrived[1][0] <= arrived[2][0]  # said before the check's line, while torch loads


def test_a_signal_after_the_checks_leaves_the_verdict_the_exit_code_and_the_report_agreeing(tmp_path: Path) -> None:
    """The report is written first, then the Prometheus text to a full pipe, where verify waits: a
    SIGINT then comes after every check finished, while outputs are still being written."""
    report = tmp_path / "r.json"
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        while True:
            os.write(write_end, b"#" * 4096)
    except BlockingIOError:
        os.set_blocking(write_end, True)
    args = ["verify", "--device", "cpu", "--check", "stack", "--report", str(report), "--prometheus", "-"]
    command = [sys.executable, "-m", "gpuenv", *args]
    proc = subprocess.Popen(command, stdout=write_end, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not _final(report):
            time.sleep(0.05)
        written = _final(report)
        assert written is not None, "the report was never written"
        proc.send_signal(signal.SIGINT)
        with os.fdopen(read_end, "rb") as pipe:
            prometheus = pipe.read().lstrip(b"#").decode()
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert written["verdict"]["exit_code"] == 0 and proc.returncode == 0, stderr
    assert "gpuenv_verify_certified" in prometheus and json.loads(report.read_text()) == written
    lines = stderr.splitlines()
    assert lines[-2] == "certified (CPU only) (1 pass)"
    assert lines[-1] == "gpuenv: SIGINT came after the checks had finished: the verdict and report stand"


def _final(report: Path) -> dict[str, object] | None:
    """The report once the run wrote it (before, the file holds the placeholder saying it never finished)."""
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        return None
    return data if data.get("interrupted") != "never finished" else None
