"""`gpuenv slurm` through the real CLI, without a Slurm: bad input is exit 2, no Slurm is exit 3."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_gpuenv


def test_config_prints_the_slurm_conf_lines() -> None:
    proc = run_gpuenv("slurm", "config", "--scripts-dir", "/opt/slurm/hooks", "--interval", "600")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "HealthCheckProgram=/opt/slurm/hooks/gpuenv-health-check"
    assert "HealthCheckInterval=600" in lines
    assert "PrologFlags=Alloc" in lines


def test_config_script_is_a_shell_script_calling_the_hook() -> None:
    proc = run_gpuenv("slurm", "config", "--script", "prolog", "--reports-dir", "/srv/reports")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("#!/bin/sh\nexec ")
    assert proc.stdout.rstrip().endswith("-q slurm prolog --reports-dir /srv/reports")


def test_a_path_with_a_space_is_a_bad_request() -> None:
    proc = run_gpuenv("slurm", "config", "--scripts-dir", "/etc/my slurm")
    assert proc.returncode == 2
    assert "plain" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_health_check_budget_past_slurmds_limit_is_refused() -> None:
    proc = run_gpuenv("slurm", "health-check", "--max-time", "60")
    assert proc.returncode == 2
    assert "10<=x<=55" in proc.stderr


def test_an_unknown_check_is_refused() -> None:
    proc = run_gpuenv("slurm", "prolog", "--check", "nosuch")
    assert proc.returncode == 2


def test_without_a_reachable_slurm_the_health_check_could_not_run(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=nohost(127.0.0.1)\nSlurmctldPort=9\n")
    proc = run_gpuenv("slurm", "health-check", env={"SLURM_CONF": str(conf), "SLURMD_NODENAME": ""}, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith("gpuenv: error:")
