"""gpuenv provision against real SSH hosts: first run, idempotent second run, become password hygiene."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

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


def test_no_stack_flags_give_each_host_the_stack_of_its_own_facts(provisioned: Provisioned) -> None:
    # The main run passed no stack flag: Debian 12 and "Ubuntu 22.04" (h2's os-release) each got
    # their own stack, torch and Python from the wheelhouse (2.13.0+cpu, cp311), in one run.
    rows: dict[str, Any] = provisioned.summary
    for row, os_name, via in ((rows["h1"], "debian12", "system"), (rows["h2"], "ubuntu22.04", "distro")):
        stack = row["stack"]
        assert stack["schema"] == "gpuenv.stack/2" and stack["os"] == os_name, stack
        assert (stack["torch"], stack["build"], stack["python"]) == ("2.13.0", "cpu", "3.11")
        assert stack["python_source"]["via"] == via and stack["torchvision"] is None
        assert row["facts"]["os"] == os_name and row["facts"]["gpus"] == []
        assert row["verify"] == "certified"
    doc = json.loads(provisioned.result.stdout)
    assert doc["stack"] is None  # two stacks: none shared
    assert "from the wheelhouse: torch 2.13.0+cpu, Python 3.11" in doc["notes"]
    assert any("torchvision and torchaudio left out" in n for n in doc["notes"])
    assert provisioned.summary["ghost"]["stack"] is None


def _host_state(host: test_hosts.TestHost) -> dict[str, tuple[int, int, int, str]]:
    """Every file of the host: mode, size, mtime, and a checksum of those under /etc and /opt.

    Left out: what an SSH login and Ansible's own temporary files touch (/root/.ansible, /var/log)
    and the kernel's file systems."""
    skip = {"proc", "sys", "dev", "run", "tmp", "var/tmp", "var/log", "root/.ansible", "home/deploy/.ansible"}
    state: dict[str, tuple[int, int, int, str]] = {}
    for folder, dirs, files in os.walk(host.root):
        rel = os.path.relpath(folder, host.root)
        dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel, d)) not in skip]
        for name in files:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            digest = ""
            if rel.split(os.sep)[0] in ("etc", "opt") and os.path.isfile(path) and not os.path.islink(path):
                digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            state[os.path.join(rel, name)] = (info.st_mode, info.st_size, info.st_mtime_ns, digest)
    return state


def _run_plan(
    provisioned: Provisioned, tmp_path: Path, *extra: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    hosts = provisioned.hosts
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(hosts.inventory())
    before = {h.name: _host_state(h) for h in hosts.hosts}
    env = {**hosts.env(), "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = run_gpuenv("provision", "-i", str(inventory), "--plan", "--json", *extra, env=env, timeout=600)
    for h in hosts.hosts:
        after = _host_state(h)
        changed = sorted(k for k in before[h.name].keys() | after.keys() if before[h.name].get(k) != after.get(k))
        assert not changed, f"--plan changed {h.name}: {changed[:20]}"
    return result, json.loads(result.stdout) if result.stdout.strip() else {}


def test_plan_shows_each_hosts_stack_and_changes_nothing(provisioned: Provisioned, tmp_path: Path) -> None:
    result, doc = _run_plan(provisioned, tmp_path, "--wheelhouse", str(provisioned.wheelhouse))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {r["host"]: r for r in doc["hosts"]}
    assert {h: p["action"] for h, p in doc["plans"].items()} == {"h1": "skip", "h2": "skip"}
    assert rows["h1"]["stack"]["os"] == "debian12" and rows["h2"]["stack"]["os"] == "ubuntu22.04"
    assert rows["h1"]["driver"] == "no driver loaded, none installed (a CPU stack needs none)"
    assert "3.11" in rows["h1"]["facts"]["pythons"] and rows["h1"]["facts"]["free_gb"] > 0
    assert all(row["changed"] == 0 for row in doc["hosts"])


def test_a_pinned_stack_refuses_the_host_it_cannot_serve(provisioned: Provisioned, tmp_path: Path) -> None:
    # Python 3.10 is Ubuntu 22.04's own; Debian 12 has no way to provide it.
    stack = tmp_path / "stack.json"
    resolved = run_gpuenv("resolve", "--os", "ubuntu22.04", "--python", "3.10", "--torch", "2.13.0", "--json")
    assert resolved.returncode == 0, resolved.stderr
    stack.write_text(resolved.stdout)
    result, doc = _run_plan(provisioned, tmp_path, "--stack", str(stack))
    assert result.returncode == 1, result.stderr[-3000:]
    rows = {r["host"]: r for r in doc["hosts"]}
    assert rows["h1"]["status"] == "refused" and rows["h1"]["stack"] is None
    assert rows["h1"]["refused"] == "debian12 has no known way to provide Python 3.10 (has 3.11)"
    assert rows["h2"]["status"] == "ok" and rows["h2"]["stack"]["python"] == "3.10"
    assert set(doc["plans"]) == {"h2"}


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


def test_no_driver_for_a_cpu_stack_and_torch_checked_against_each_hosts_stack(provisioned: Provisioned) -> None:
    for name in ("h1", "h2"):
        assert provisioned.summary[name]["driver"] == "no driver loaded, none installed (a CPU stack needs none)"
    ran: dict[str, set[str]] = {}
    for path in provisioned.artifacts.glob("artifacts/*/job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok":
            ran.setdefault(str(data.get("task")), set()).add(str(data.get("host")))
    assert ran["Check the venv's torch is the one this host's stack names"] == {"h1", "h2"}
    assert "Work out the driver plan" not in ran  # the driver role did not run


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
