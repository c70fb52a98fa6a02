"""gpuenv's Slurm hooks against a real slurmctld and slurmd (see conftest.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.slurm.conftest import NODE, Slurm, leftover_processes, new_mark

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def health_check(slurm: Slurm, *args: str, fault: str = "", mark: str = "", timeout: float = 120) -> tuple[int, str]:
    env = {**slurm.env, "GPUENV_TEST_FAULT": fault, "GPUENV_TEST_MARK": mark or slurm.root.name}
    proc = subprocess.run(
        [sys.executable, "-m", "gpuenv", "slurm", "health-check", *args],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )  # fmt: skip
    return proc.returncode, proc.stderr


def test_a_failing_health_check_drains_and_the_next_passing_one_resumes(idle: Slurm) -> None:
    reports = idle.root / "reports"
    code, err = health_check(idle, "--check", "nvml", "--expect-gpus", "8", "--reports-dir", str(reports))
    assert code == 1, err
    state, reason = idle.node()
    assert "drain" in state
    assert reason.startswith("gpuenv: nvml"), reason
    report = json.loads((reports / f"{NODE}-health-check.json").read_text())  # where fleet report reads it
    assert report["verdict"]["exit_code"] == 1
    assert "8" in reason
    first = idle.reason_line()
    code, err = health_check(idle, "--check", "nvml", "--expect-gpus", "8")  # idempotent: changes nothing
    assert code == 1, err
    assert idle.reason_line() == first
    code, err = health_check(idle, "--check", "stack", "--max-time", "55")
    assert code == 0, err
    assert "resumed" in err
    idle.wait_for(lambda: idle.node()[0] == "idle", 30, "the node was not resumed")


def test_a_corrupt_allreduce_drains_naming_the_check(idle: Slurm) -> None:
    code, err = health_check(idle, "--check", "allreduce", "--max-time", "55", fault="allreduce:corrupt")
    assert code == 1, err
    state, reason = idle.node()
    assert "drain" in state
    assert reason.startswith("gpuenv: allreduce"), reason


def test_a_node_drained_by_hand_for_another_reason_stays_drained(idle: Slurm) -> None:
    idle.cmd("scontrol", "update", f"nodename={NODE}", "state=drain", "reason=bad DIMM B2")
    code, err = health_check(idle, "--check", "stack", "--max-time", "55")
    assert code == 0, err
    assert idle.node() == ("drained", "bad DIMM B2")
    code, err = health_check(idle, "--check", "nvml", "--expect-gpus", "8")
    assert code == 1, err
    assert idle.node() == ("drained", "bad DIMM B2")  # the operator's reason is not overwritten


def test_could_not_run_drains_unless_told_not_to(idle: Slurm) -> None:
    code, err = health_check(idle, "--check", "stack", "--no-drain-on-error", fault="stack:bogus")
    assert code == 3, err
    assert idle.node()[0] == "idle"
    code, err = health_check(idle, "--check", "stack", fault="stack:bogus")
    assert code == 3, err
    state, reason = idle.node()
    assert "drain" in state
    assert reason.startswith("gpuenv: could not run: "), reason
    assert "GPUENV_TEST_FAULT" in reason


def test_a_hung_check_ends_within_the_budget_and_leaves_no_process(idle: Slurm) -> None:
    mark = new_mark()
    started = time.monotonic()
    code, err = health_check(idle, "--check", "stack", "--max-time", "20", fault="stack:hang", mark=mark)
    elapsed = time.monotonic() - started
    assert code == 1, err
    assert elapsed < 20, f"the health check took {elapsed:.1f} s of a 20 s budget"
    assert leftover_processes(mark) == []
    state, reason = idle.node()
    assert "drain" in state
    assert re.match(r"gpuenv: (stack\.timeout|verify\.budget)", reason), reason


def test_a_site_checks_failure_drains_with_its_code_and_its_pass_resumes(idle: Slurm, tmp_path: Path) -> None:
    """The site's own check, enabled in the config file as a fleet would, inside the hook's verdict."""
    down = {"code": "port-down", "severity": "fail", "message": "mlx5_0 port 1 down"}
    answer = {"status": "fail", "findings": [down]}
    folder = tmp_path / "checks.d"
    folder.mkdir()
    ib = folder / "ib"
    ib.write_text(
        '#!/bin/sh\n# gpuenv-check: name = "ib"\n# gpuenv-check: timeout = 10\n'
        f"[ -e {tmp_path}/healthy ] && exit 0\necho '{json.dumps(answer)}'\n"
    )
    ib.chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text(f'[verify]\nchecks-dir = "{folder}"\n')
    env = {**idle.env, "GPUENV_NO_CONFIG": "", "GPUENV_CONFIG": str(config), "GPUENV_TEST_MARK": idle.root.name}
    hook = [sys.executable, "-m", "gpuenv", "slurm", "health-check", "--check", "site.ib", "--max-time", "30"]
    out = subprocess.run(hook, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert out.returncode == 1, out.stderr
    state, reason = idle.node()
    assert "drain" in state
    assert reason == "gpuenv: site.ib.port-down mlx5_0 port 1 down", reason
    (tmp_path / "healthy").touch()
    out = subprocess.run(hook, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert out.returncode == 0 and "resumed" in out.stderr, out.stderr
    idle.wait_for(lambda: idle.node()[0] == "idle", 30, "the node was not resumed")


def test_slurmd_runs_the_health_check_with_its_node_name(idle: Slurm) -> None:
    idle.steer("health-check", args="--check nvml --expect-gpus 8")
    idle.restart_slurmd()  # slurmd runs HealthCheckProgram when it starts
    idle.wait_for(lambda: idle.node()[1].startswith("gpuenv: nvml"), 120, "slurmd's health check did not drain")
    assert f"SLURMD_NODENAME={NODE}" in (idle.root / "health-check.env").read_text()
    idle.steer("health-check", args="--check stack")
    idle.restart_slurmd()
    idle.wait_for(lambda: idle.node()[0] == "idle", 120, "slurmd's passing health check did not resume")


def _job(slurm: Slurm) -> str:
    out = slurm.cmd("sbatch", "--parsable", "--requeue", "-o", str(slurm.root / "job-%j.out"), "--wrap", "echo ran")
    return out.strip().split(";")[0]


def _job_field(slurm: Slurm, job: str, name: str) -> str:
    match = re.search(rf"\b{name}=(\S+)", slurm.cmd("scontrol", "show", "job", job))
    return match.group(1) if match else ""


def test_a_passing_prolog_runs_the_job(idle: Slurm) -> None:
    job = _job(idle)
    idle.wait_for(lambda: _job_field(idle, job, "JobState") == "COMPLETED", 180, f"job {job} did not complete")
    assert (idle.root / f"job-{job}.out").read_text() == "ran\n"
    idle.wait_for(lambda: idle.node()[0] == "idle", 60, "the node did not return to idle after the epilog")


def test_a_failing_prolog_requeues_the_job_and_drains_the_node(idle: Slurm) -> None:
    idle.steer("prolog", fault="allreduce:corrupt", args="--check allreduce")
    job = _job(idle)
    idle.wait_for(lambda: "drain" in idle.node()[0], 180, "a failing prolog did not drain the node")
    idle.wait_for(lambda: _job_field(idle, job, "Restarts") not in ("", "0"), 60, f"job {job} was not requeued")
    # requeued: the job goes through COMPLETING back to PENDING, and never ran
    idle.wait_for(lambda: _job_field(idle, job, "JobState") == "PENDING", 60, f"job {job} did not go back to pending")
    assert not (idle.root / f"job-{job}.out").exists() or "ran" not in (idle.root / f"job-{job}.out").read_text()
    assert idle.node()[1].startswith("gpuenv: allreduce"), idle.node()


def test_a_health_check_that_could_judge_nothing_does_not_resume(idle: Slurm) -> None:
    """On a CPU-only node nvml is skipped: nothing was tested, so gpuenv's drain stays."""
    health_check(idle, "--check", "nvml", "--expect-gpus", "8")
    code, err = health_check(idle, "--check", "nvml")
    assert code == 0, err
    assert "skip: nvml" in err
    assert idle.node()[1].startswith("gpuenv: nvml")


def test_the_epilog_on_a_cpu_only_node_skips_and_does_not_drain(idle: Slurm) -> None:
    env = {**idle.env, "SLURM_JOB_ID": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "gpuenv", "slurm", "epilog"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "skip: nvml" in proc.stderr
    assert idle.node()[0] == "idle"


def test_the_epilog_knows_when_the_job_started(idle: Slurm, monkeypatch: pytest.MonkeyPatch) -> None:
    """The start the kernel-log XIDs are read from. Slurm 22.05's slurmd sets no
    SLURM_JOB_START_TIME in the epilog's environment: scontrol's StartTime of the finished job it is."""
    from gpuenv.slurm import service

    submitted = time.time()
    job = _job(idle)
    idle.wait_for(lambda: _job_field(idle, job, "JobState") == "COMPLETED", 180, f"job {job} did not complete")
    idle.wait_for(lambda: idle.node()[0] == "idle", 60, "the node did not return to idle after the epilog")
    lines = (idle.root / "epilog.env").read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines if "=" in line)
    assert env["SLURM_JOB_ID"] == job
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
    start = service._job_start(env)
    assert start is not None and int(submitted) <= start <= time.time()
