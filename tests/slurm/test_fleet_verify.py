"""gpuenv fleet verify --slurm on the real test Slurm: three slurmd on this machine (this node, n2,
n3: the fleet partition) and a ghost node no slurmd answers for, through the CLI. Every node's gpuenv
is the test venv's (--venv); a fault or a setting reaches every task through srun's environment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpuenv.fleet import history
from gpuenv.resources import data_file
from tests.conftest import REPO
from tests.slurm.conftest import EXTRA_NODES, GHOST, NODE, Slurm, leftover_processes, new_mark

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
VENV = str(REPO / ".venv")
CHECKS = ("--check", "stack", "--check", "nvml", "--device", "cpu")  # the quickest run that can certify a CPU node
NODES = (NODE, *EXTRA_NODES)
FLEET_SCHEMA = json.loads(data_file("schemas/fleet-report.schema.json").read_text())


def fleet_verify(cluster: Slurm, work: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "gpuenv", "fleet", "verify", "--slurm", "--partition", "fleet", "--venv", VENV,
        "--history", str(work / "h.sqlite"), "--json", *args,
    ]  # fmt: skip
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or cluster.env, cwd=work
    )


def summary_of(proc: subprocess.Popen[str], timeout: float = 400) -> tuple[int, dict[str, Any], str]:
    """(exit code, the --json summary, stderr)."""
    out, err = proc.communicate(timeout=timeout)
    try:
        return proc.returncode, json.loads(out), err
    except json.JSONDecodeError:
        pytest.fail(f"fleet verify --slurm printed no JSON (rc {proc.returncode}): {err[-3000:]}")


def finished(proc: subprocess.Popen[str], timeout: float = 400) -> tuple[int, dict[str, Any], str]:
    rc, doc, err = summary_of(proc, timeout)
    return rc, {h["host"]: h for h in doc["hosts"]}, err


def outcomes(hosts: dict[str, Any]) -> dict[str, str]:
    return {name: row["outcome"] for name, row in hosts.items()}


def test_nodes_are_certified_and_the_ones_slurm_cannot_start_a_task_on_are_unreachable(
    fleet_idle: Slurm, tmp_path: Path
) -> None:
    fleet_idle.cmd("scontrol", "update", "nodename=n3", "state=drain", "reason=gpuenv: test drain")
    rc, doc, err = summary_of(fleet_verify(fleet_idle, tmp_path, *CHECKS, "--reports-dir", str(tmp_path / "r")))
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert rc == 1, err[-3000:]
    assert outcomes(hosts) == {NODE: "certified", "n2": "certified", "n3": "unreachable", GHOST: "unreachable"}
    assert hosts["n3"]["message"] == "Slurm has it drained: gpuenv: test drain"
    assert hosts[GHOST]["message"].startswith("Slurm has it ") and "(sinfo -R shows why)" not in err
    for node in (NODE, "n2"):
        report = json.loads((tmp_path / "r" / f"{node}.json").read_text())
        assert report["verdict"]["outcome"] == "certified" and hosts[node]["report"].endswith(f"/{node}.json")
        assert history.timeline(tmp_path / "h.sqlite", node)[1][0].outcome == "certified"
    summary = json.loads((tmp_path / "r" / "fleet-verify.json").read_text())
    assert {h["host"] for h in summary["hosts"]} == {*NODES, GHOST}
    assert "[4/4 done, 2 failing]" in err
    fleet = doc["fleet_report"]  # the fleet report over the run, as the Ansible path ends with it
    jsonschema.validate(fleet, FLEET_SCHEMA)
    counted = {outcome: n for outcome, n in fleet["outcomes"].items() if n}
    assert counted == {"certified": 2, "unreachable": 2} and fleet["healthy"] is False
    # the nodes not certified, again: n3 resumed now, the ghost still unreachable
    fleet_idle.cmd("scontrol", "update", "nodename=n3", "state=resume")
    n3_state = lambda: fleet_idle.cmd("sinfo", "-h", "-N", "-n", "n3", "-o", "%T").strip()  # noqa: E731
    fleet_idle.wait_for(lambda: n3_state() == "idle", 60, "n3 did not come back idle after resume")
    again = fleet_verify(fleet_idle, tmp_path, *CHECKS, "--retry-failed", str(tmp_path / "r"))
    rc, hosts, err = finished(again)
    assert (rc, outcomes(hosts)) == (1, {"n3": "certified", GHOST: "unreachable"}), err[-3000:]


def test_a_failing_check_fails_every_node_and_a_policy_sent_on_stdin_reaches_each(
    fleet_idle: Slurm, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.json"  # every task gets the file on srun's stdin: the finding is said to warn
    policy.write_text(json.dumps({"schema": "gpuenv.nvml-policy/1", "rules": {"gpu_missing": {"severity": "warn"}}}))
    # the policy lets the missing GPUs warn: the nodes are certified with it, not without
    for given, severity, rc_outcome in (
        ((), "fail", (1, {"not certified"})),
        (("--policy", str(policy)), "warn", (0, {"certified"})),
    ):
        proc = fleet_verify(fleet_idle, tmp_path, *CHECKS, "--nodelist", ",".join(NODES), "--expect-gpus", "8", *given)
        rc, hosts, err = finished(proc)
        assert (rc, set(outcomes(hosts).values())) == rc_outcome, err[-3000:]
        for node in NODES:
            report = json.loads(Path(hosts[node]["report"]).read_text())
            found = {f["code"]: f["severity"] for c in report["checks"] for f in c["findings"]}
            assert found["nvml.gpu_missing"] == severity


def test_a_node_past_its_limit_times_out_and_a_missing_gpuenv_is_not_provisioned(
    fleet_idle: Slurm, tmp_path: Path
) -> None:
    env = {**fleet_idle.env, "GPUENV_TEST_FAULT": "nvml:hang"}
    proc = fleet_verify(fleet_idle, tmp_path, *CHECKS, "--nodelist", f"{NODE},n2", "--host-timeout", "15", env=env)
    rc, hosts, err = finished(proc)
    assert (rc, outcomes(hosts)) == (1, {NODE: "timeout", "n2": "timeout"}), err[-3000:]
    partial = json.loads(Path(hosts["n2"]["report"]).read_text())  # verify's partial report, after SIGTERM
    assert partial["partial"] and partial["interrupted"]
    rc, hosts, err = finished(fleet_verify(fleet_idle, tmp_path, *CHECKS, "--nodelist", "n2", "--venv", "/nonexistent"))
    assert (rc, outcomes(hosts)) == (1, {"n2": "not provisioned"}), err[-3000:]
    assert hosts["n2"]["message"] == "no gpuenv at /nonexistent/bin/gpuenv (run gpuenv provision)"


def test_sigterm_stops_the_srun_step_and_every_task(fleet_idle: Slurm, tmp_path: Path) -> None:
    mark = new_mark()
    env = {**fleet_idle.env, "GPUENV_TEST_FAULT": "nvml:hang", "GPUENV_TEST_MARK": mark}
    proc = fleet_verify(fleet_idle, tmp_path, *CHECKS, "--nodelist", ",".join(NODES), env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "RUNNING" not in fleet_idle.cmd("squeue", "-h", "-p", "fleet", "-o", "%T"):
        time.sleep(0.5)
    time.sleep(3)  # the tasks' verify started
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3 and "interrupted by SIGTERM" in err, err[-3000:]
    fleet_idle.wait_for(lambda: not fleet_idle.cmd("squeue", "-h", "-p", "fleet").strip(), 30, "the job ended")
    deadline = time.monotonic() + 20
    while leftover_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not leftover_processes(mark)


def test_one_collective_across_the_nodes_through_srun(fleet_idle: Slurm, tmp_path: Path) -> None:
    env = {**fleet_idle.env, "MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}  # n2 is no host name here
    args = ("--multi-node", "--device", "cpu", "--check-timeout", "90", "--nodelist", f"{NODE},n2")
    rc, hosts, err = finished(fleet_verify(fleet_idle, tmp_path, *args, env=env))
    assert (rc, outcomes(hosts)) == (0, {NODE: "certified", "n2": "certified"}), err[-3000:]
    for node in (NODE, "n2"):
        multi = json.loads(Path(hosts[node]["report"]).read_text())["multi_node"]
        assert (multi["launcher"], multi["node"], multi["nnodes"], multi["world"]) == ("srun", node, 2, 2)
        assert multi["inter_node"]["busbw_gbps"] > 0
