"""`gpuenv slurm` through the real CLI, without a Slurm: bad input is exit 2, no Slurm is exit 3."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuenv.slurm import service
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


def _fake_slurm(tmp_path: Path, show_node: str = "") -> tuple[dict[str, str], Path]:
    """scontrol and sinfo first on PATH, each logging its arguments; `scontrol show node` prints show_node."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir(parents=True)
    for tool in ("scontrol", "sinfo"):
        script = bin_dir / tool
        answer = f"echo '{show_node}'" if tool == "scontrol" and show_node else "true"
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\ncase "$*" in *"show node"*) {answer};; esac\n')
        script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURMD_NODENAME": ""}, log


NOT_ONE_NODE = ["ALL", "all", "node[1-4]", "gpu01,gpu02", "gpu01 state=resume", "gpu01\nstate=resume", "../x", "a=b"]


@pytest.mark.parametrize("name", NOT_ONE_NODE)
@pytest.mark.parametrize("given_by", ["--node", "SLURMD_NODENAME"])
def test_a_name_that_is_not_one_slurm_node_is_refused_before_any_slurm_call(
    tmp_path: Path, name: str, given_by: str
) -> None:
    env, log = _fake_slurm(tmp_path)
    if given_by == "--node":
        proc = run_gpuenv("slurm", "health-check", "--node", name, env=env, timeout=60)
    else:
        proc = run_gpuenv("slurm", "health-check", env={**env, "SLURMD_NODENAME": name}, timeout=60)
    assert proc.returncode == 2, proc.stderr
    error, hint = proc.stderr.splitlines()
    assert error.startswith("gpuenv: error:") and given_by in error and hint.startswith("  hint:")
    assert not log.exists(), log.read_text()


def test_the_hook_uses_the_node_name_scontrol_confirms_and_refuses_an_unknown_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, log = _fake_slurm(tmp_path, show_node="NodeName=gpu01 Arch=x86_64 State=IDLE")
    for name, value in env.items():  # the service reads the node name and runs scontrol in this process
        monkeypatch.setenv(name, value)
    assert service.find_node("gpu01") == "gpu01"
    assert log.read_text() == "scontrol -o show node gpu01\n"
    unknown, _ = _fake_slurm(tmp_path / "unknown")
    proc = run_gpuenv("slurm", "health-check", "--node", "gpu99", env=unknown, timeout=60)
    assert proc.returncode == 2 and "knows no node named 'gpu99' (from --node)" in proc.stderr, proc.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-5", "0"])
def test_the_budget_is_a_finite_number_of_seconds(tmp_path: Path, value: str) -> None:
    env, log = _fake_slurm(tmp_path)
    proc = run_gpuenv("slurm", "health-check", "--node", "gpu01", "--max-time", value, env=env, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "--max-time" in proc.stderr and "Traceback" not in proc.stderr
    assert not log.exists()
