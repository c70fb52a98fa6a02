"""gpuenv fleet verify against real SSH hosts: the two provisioned test hosts (one made to fail by
its own /etc/gpuenv/config.toml asking for 8 GPUs), a bare host with no gpuenv, and an address
nothing listens on. Then --retry-failed, as a user who becomes root with su and a password file."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuenv.fleet import history
from tests.conftest import REPO, run_gpuenv
from tests.provision import hosts as test_hosts
from tests.provision.fixtures import Provisioned

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
CHECKS = ("--check", "stack", "--check", "nvml", "--device", "cpu")  # the quickest run that can certify a CPU host


@pytest.fixture(scope="module")
def bare_host(bookworm_rootfs_tar: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[test_hosts.HostSet]:
    """A third host, reachable but never provisioned."""
    hosts = test_hosts.make_hosts(bookworm_rootfs_tar, tmp_path_factory.mktemp("bare-host"), ["bare"], first_address=31)
    try:
        yield hosts
    finally:
        test_hosts.stop_hosts(hosts)


@dataclass
class Fleet:
    provisioned: Provisioned
    bare: test_hosts.HostSet
    work: Path
    inventory: Path
    env: dict[str, str]
    first: subprocess.CompletedProcess[str]
    history: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_gpuenv(
            "fleet", "verify", "-i", str(self.inventory), "--history", str(self.history), *CHECKS, *args,
            env=self.env, timeout=600, cwd=self.work,
        )  # fmt: skip


@pytest.fixture(scope="module")
def fleet(provisioned: Provisioned, bare_host: test_hosts.HostSet, tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    work = tmp_path_factory.mktemp("fleet")
    hosts = provisioned.hosts
    inventory = work / "hosts.ini"
    inventory.write_text(
        hosts.inventory(unreachable=True) + bare_host.hosts[0].ini_line(bare_host.key) + "\n"
    )  # h1, h2, ghost (unreachable), bare
    known = work / "known_hosts"
    known.write_text(hosts.known_hosts.read_text() + bare_host.known_hosts.read_text())
    env = {
        **hosts.env(),
        "ANSIBLE_SSH_ARGS": f"-o ControlMaster=no -o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes",
        "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    fleet = Fleet(provisioned, bare_host, work, inventory, env, subprocess.CompletedProcess([], 0), work / "h.sqlite")
    setting = hosts.hosts[1].root / "etc" / "gpuenv" / "config.toml"  # h2's admin asks verify for 8 GPUs
    setting.parent.mkdir(parents=True, exist_ok=True)
    setting.write_text("[verify]\nexpect-gpus = 8\n")
    try:
        fleet.first = fleet.run("--reports-dir", str(work / "first"), "--json")
    finally:
        setting.unlink()
    return fleet


def outcomes(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    try:
        doc = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"fleet verify printed no JSON (rc {result.returncode}): {result.stderr[-3000:]}")
    return {h["host"]: h for h in doc["hosts"]}


def test_each_host_ends_with_its_outcome_and_the_run_exits_1(fleet: Fleet) -> None:
    result = fleet.first
    assert result.returncode == 1, result.stderr[-3000:]
    hosts = outcomes(result)
    assert {h: row["outcome"] for h, row in hosts.items()} == {
        "h1": "certified",
        "h2": "not certified",
        "ghost": "unreachable",
        "bare": "not provisioned",
    }
    assert "run gpuenv provision" in hosts["bare"]["message"]
    assert "[4/4 done, 3 failing]" in result.stderr  # live progress


def test_reports_are_collected_and_the_summary_written(fleet: Fleet) -> None:
    reports = fleet.work / "first"
    hosts = outcomes(fleet.first)
    for name in ("h1", "h2"):
        assert hosts[name]["report"] == str(reports / f"{name}.json")
    h2 = json.loads((reports / "h2.json").read_text())
    assert h2["verdict"]["outcome"] == "not certified"
    codes = {f["code"] for c in h2["checks"] for f in c["findings"]}
    assert "nvml.gpu_missing" in codes  # h2's own setting asked for 8 GPUs: it has none
    assert json.loads((reports / "h1.json").read_text())["verdict"]["outcome"] == "certified"
    assert not (reports / "bare.json").exists() and not (reports / "ghost.json").exists()
    summary = json.loads((reports / "fleet-verify.json").read_text())
    assert summary["schema"] == "gpuenv.fleet-verify/1" and len(summary["hosts"]) == 4


def test_the_reports_are_in_the_history(fleet: Fleet) -> None:
    kind, rows = history.timeline(fleet.history, "h2")
    assert kind == "host" and len(rows) == 1
    assert rows[0].outcome == "not certified" and "nvml.gpu_missing" in rows[0].report_codes
    assert history.timeline(fleet.history, "h1")[1][0].outcome == "certified"
    assert history.timeline(fleet.history, "bare") == ("none", [])


def test_retry_failed_runs_only_those_hosts_as_deploy_without_leaking_the_password(fleet: Fleet) -> None:
    secret = fleet.work / "become.txt"
    secret.write_text(test_hosts.ROOT_PASSWORD + "\n")
    secret.chmod(0o600)
    again, artifacts = fleet.work / "again", fleet.work / "artifacts"
    args = ("--retry-failed", str(fleet.work / "first"), "--reports-dir", str(again), "--json")
    become = ("--user", "deploy", "--become-method", "su", "--become-password-file", str(secret))
    result = fleet.run(*args, *become, "--artifacts-dir", str(artifacts))
    assert result.returncode == 1, result.stderr[-3000:]
    hosts = outcomes(result)  # h2's setting is gone (fixed): it certifies now; h1 is not run again
    assert {h: row["outcome"] for h, row in hosts.items()} == {
        "h2": "certified",
        "ghost": "unreachable",
        "bare": "not provisioned",
    }
    assert 'ansible_become_method: "su"' in (artifacts / "project/inventory/hosts.yml").read_text()
    assert test_hosts.ROOT_PASSWORD not in result.stdout + result.stderr
    searched = 0
    for root in (again, artifacts):
        for path in root.rglob("*"):
            if path.is_file():
                searched += 1
                assert test_hosts.ROOT_PASSWORD.encode() not in path.read_bytes(), path
    assert searched > 5


def test_a_policy_goes_on_stdin_and_a_host_past_its_limit_times_out(fleet: Fleet) -> None:
    from tests.fleet.test_multinode_hosts import fault_on

    # sent on each host's stdin (verify --inputs -): the missing GPUs only warn, so h2 is certified (without it, not)
    policy = fleet.work / "warn.json"
    policy.write_text(json.dumps({"schema": "gpuenv.nvml-policy/1", "rules": {"gpu_missing": {"severity": "warn"}}}))
    reports = fleet.work / "third"
    limits = ("--host-timeout", "60", "--check-timeout", "300")  # h2 runs whole even on a loaded machine
    with fault_on(fleet.provisioned, 0, "nvml:hang"):  # h1's nvml check never ends
        result = fleet.run("--limit", "h1,h2", "--expect-gpus", "8", "--policy", str(policy), *limits,
                           "--reports-dir", str(reports), "--json")  # fmt: skip
    hosts = outcomes(result)
    assert {h: row["outcome"] for h, row in hosts.items()} == {"h1": "timeout", "h2": "certified"}
    assert hosts["h1"]["message"].startswith("verify ran past the host's limit")
    partial = json.loads((reports / "h1.json").read_text())  # verify's partial report, after timeout's SIGTERM
    assert partial["partial"] and partial["interrupted"]
    h2 = json.loads((reports / "h2.json").read_text())
    assert {f["code"]: f["severity"] for c in h2["checks"] for f in c["findings"]}["nvml.gpu_missing"] == "warn"
