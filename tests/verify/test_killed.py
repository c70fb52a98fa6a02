"""A check's process or a rank killed by SIGKILL (the OOM killer, a job's limit): the run still
writes its report, not certified, naming the check and the signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuenv.verify import reportfile
from tests.conftest import run_gpuenv
from tests.verify.conftest import check, scenario_env


def test_a_check_process_killed_by_sigkill_still_gives_a_failing_report(fake_nvml_dir: Path, tmp_path: Path) -> None:
    report_path = tmp_path / "verify.json"
    env = {**scenario_env(fake_nvml_dir, "healthy-8xh100"), "GPUENV_TEST_FAULT": "nvml:kill"}
    done = run_gpuenv("verify", "--check", "nvml", "--report", str(report_path), env=env)
    report = json.loads(report_path.read_text())
    result = check(report, "nvml")
    assert done.returncode == 1 and not report["verdict"]["certified"]
    assert report["verdict"]["outcome"] == "not certified" and "nvml" in report["verdict"]["summary"]
    assert result["status"] == "crash" and result["detail"]["signal"] == "SIGKILL"
    assert "its process died by SIGKILL" in result["summary"] and "OOM killer" in result["summary"]


@pytest.mark.cpu
def test_a_rank_killed_by_sigkill_still_gives_a_failing_report(tmp_path: Path) -> None:
    report_path = tmp_path / "verify.json"
    env = {"GPUENV_TEST_FAULT": "allreduce:kill:rank1"}
    done = run_gpuenv(
        "verify", "--device", "cpu", "--check", "allreduce", "--report", str(report_path), env=env, timeout=300
    )
    report = json.loads(report_path.read_text())
    result = check(report, "allreduce")
    assert done.returncode == 1 and not report["verdict"]["certified"]
    assert result["status"] == "crash" and result["detail"]["signal"] == "SIGKILL" and result["detail"]["rank"] == 1
    assert result["summary"] == "rank 1 died with SIGKILL"


def test_verify_killed_by_sigkill_leaves_a_report_that_says_it_never_finished(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """Nothing can write after SIGKILL: the report written at the start stands, and every reader
    takes it for a failure, never for the certified report an earlier run left at that path."""
    report_path = tmp_path / "verify.json"
    report_path.write_text(json.dumps({"schema": "gpuenv.verify-report/2", "verdict": {"outcome": "certified"}}))
    env = {**os.environ, **scenario_env(fake_nvml_dir, "healthy-8xh100"), "GPUENV_TEST_FAULT": "nvml:hang"}
    command = [sys.executable, "-m", "gpuenv", "verify", "--check", "nvml", "--report", str(report_path)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and b'"never finished"' not in report_path.read_bytes():
            time.sleep(0.05)
        time.sleep(0.5)  # the check's worker is hanging by now
        proc.kill()
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    outcome, summary = reportfile.verdict_of(report_path)
    assert outcome == "interrupted" and summary is not None and "never finished" in summary
    fleet = run_gpuenv("fleet", "report", str(tmp_path), "--json", "--no-history")
    assert fleet.returncode == 1 and json.loads(fleet.stdout)["healthy"] is False


def test_a_bad_request_found_during_the_run_leaves_no_report(fake_nvml_dir: Path, tmp_path: Path) -> None:
    report_path = tmp_path / "verify.json"
    done = run_gpuenv(
        "verify", "--check", "nvml", "--gpus", "9", "--report", str(report_path),
        env=scenario_env(fake_nvml_dir, "healthy-8xh100"),
    )  # fmt: skip
    assert done.returncode == 2 and "no such GPU" in done.stderr
    assert not report_path.exists()
