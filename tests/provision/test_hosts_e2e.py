"""gpuenv provision against real SSH hosts: first run, idempotent second run, become password hygiene."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, run_gpuenv
from tests.provision import hosts as test_hosts
from tests.provision.fixtures import Provisioned

pytestmark = [pytest.mark.ssh, pytest.mark.slow]


def _in_host(host: test_hosts.TestHost, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chroot", str(host.root), *argv], capture_output=True, text=True, timeout=120)


def test_two_hosts_finish_and_the_unreachable_one_is_named(provisioned: Provisioned) -> None:
    result, summary = provisioned.result, provisioned.summary
    assert result.returncode == 1, result.stderr[-3000:]
    assert summary["h1"]["status"] == "ok", summary["h1"]
    assert summary["h2"]["status"] == "ok", summary["h2"]
    assert summary["ghost"]["status"] == "unreachable"
    assert summary["ghost"]["unreachable"] >= 1
    assert summary["h1"]["changed"] > 0 and summary["h2"]["changed"] > 0


def test_dry_run_on_the_bare_host_reported_changes_and_made_none(provisioned: Provisioned) -> None:
    dry = provisioned.dry_run
    assert dry is not None and dry.returncode == 0, dry.stderr[-3000:] if dry else None
    doc = json.loads(dry.stdout)
    assert doc["check"] is True
    (row,) = doc["hosts"]
    assert row["host"] == "h1" and row["status"] == "ok" and row["changed"] > 0
    assert row["verify"] is None  # nothing certified in check mode
    assert provisioned.left_after_dry_run == ()


def test_plan_only_run_names_each_hosts_decision(provisioned: Provisioned, tmp_path: Path) -> None:
    hosts = provisioned.hosts
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(hosts.inventory())
    env = {**hosts.env(), "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = run_gpuenv(
        "provision",
        "-i",
        str(inventory),
        "--os",
        "debian12",
        "--python",
        "3.11",
        "--plan",
        "--json",
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    doc = json.loads(result.stdout)
    assert {h: p["action"] for h, p in doc["plans"].items()} == {"h1": "skip", "h2": "skip"}
    assert all(row["changed"] == 0 for row in doc["hosts"])


def test_a_host_that_cannot_be_certified_fails(provisioned: Provisioned, tmp_path: Path) -> None:
    # Asking verify for CUDA on a host without a GPU: the host must fail, never pass.
    hosts = provisioned.hosts
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(hosts.inventory(["h1"]))
    reports = tmp_path / "reports"
    args = [a if a != str(provisioned.reports) else str(reports) for a in provisioned.args(inventory)]
    args[args.index("cpu")] = "cuda"
    env = {**hosts.env(), "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = run_gpuenv(*args, env=env, timeout=600)
    assert result.returncode == 1, result.stderr[-3000:]
    (row,) = json.loads(result.stdout)["hosts"]
    assert row["status"] == "failed" and row["changed"] == 0
    assert "Fail the host when it is not certified" in (row["message"] or ""), row
    assert row["verify"] in ("not certified", "could not run"), row  # verify exits 1 or 3, never 0
    assert row["report"] == str(reports / "h1.json")


def test_driver_role_skips_without_a_gpu(provisioned: Provisioned) -> None:
    events = "".join(p.read_text() for p in provisioned.artifacts.glob("artifacts/*/job_events/*.json"))
    assert "NVIDIA driver skipped: no NVIDIA GPU found on the PCI bus" in events


def test_torch_and_gpuenv_are_in_the_hosts_venv(provisioned: Provisioned) -> None:
    for host in provisioned.hosts.hosts:
        probe = _in_host(
            host,
            "/opt/gpuenv/venv/bin/python",
            "-c",
            "import torch, gpuenv, rich; print(torch.__version__, gpuenv.__version__)",
        )
        assert probe.returncode == 0, probe.stderr
        assert probe.stdout.startswith("2.13.0"), probe.stdout
        assert (host.root / "opt/gpuenv/venv/bin/gpuenv").is_file()
        assert (host.root / "usr/include/python3.11/Python.h").is_file()  # headers for torch.compile
        assert (host.root / "usr/bin/gcc").exists()


def test_verify_reports_come_back_certified(provisioned: Provisioned) -> None:
    for name in ("h1", "h2"):
        report = provisioned.reports / f"{name}.json"
        assert report.is_file(), f"no report for {name}"
        data = json.loads(report.read_text())
        assert data["verdict"]["outcome"] == "certified", data["verdict"]
        assert data["device"] == "cpu"
        assert provisioned.summary[name]["verify"] == "certified"
        assert provisioned.summary[name]["report"] == str(report)


def test_second_run_as_deploy_with_su_changes_nothing_and_hides_the_password(
    provisioned: Provisioned, tmp_path: Path
) -> None:
    hosts = provisioned.hosts
    inventory = tmp_path / "hosts.yml"
    lines = ["all:", "  children:", "    gpu:", "      hosts:"]
    for h in hosts.hosts:
        lines += [
            f"        {h.name}:",
            f"          ansible_host: {h.address}",
            f"          ansible_port: {h.port}",
            f"          ansible_ssh_private_key_file: {hosts.key}",
            "          ansible_python_interpreter: /usr/bin/python3",
        ]
    inventory.write_text("\n".join(lines) + "\n")
    secret = tmp_path / "become.txt"
    secret.write_text(test_hosts.ROOT_PASSWORD + "\n")
    secret.chmod(0o600)  # gpuenv refuses a password file others can read
    artifacts = tmp_path / "artifacts"
    args = provisioned.args(
        inventory,
        "--user",
        "deploy",
        "--become-method",
        "su",
        "--become-password-file",
        str(secret),
        "--artifacts-dir",
        str(artifacts),
    )
    env = {**hosts.env(), "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = run_gpuenv(*args, env=env, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    summary = {h["host"]: h for h in json.loads(result.stdout)["hosts"]}
    assert set(summary) == {"h1", "h2"}
    for name, row in summary.items():
        assert row["changed"] == 0, f"{name} changed on the second run: {row}"
        assert row["ok"] > 10
        assert row["verify"] == "certified"
    # The password appears nowhere: not in argv, output, events, artifacts or reports.
    assert test_hosts.ROOT_PASSWORD not in " ".join(args)
    assert test_hosts.ROOT_PASSWORD not in result.stdout + result.stderr
    searched = 0
    for root in (artifacts, provisioned.reports, provisioned.artifacts):
        for path in root.rglob("*"):
            if path.is_file():
                searched += 1
                assert test_hosts.ROOT_PASSWORD.encode() not in path.read_bytes(), path
    assert searched > 20
    # Every task ran as deploy and became root through su (apt, /opt and the checks need root).
    rendered = (artifacts / "project" / "inventory" / "hosts.yml").read_text()
    assert 'ansible_user: "deploy"' in rendered and 'ansible_become_method: "su"' in rendered
    assert "ansible_become: true" in rendered
