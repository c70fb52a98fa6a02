"""Session fixtures: two real SSH test hosts (chrooted sshd), shared by every test that needs hosts
(provision, fleet, multi-node); loaded for the whole suite by tests/conftest.py.

Ansible runs cost seconds each on a 2-core machine, so the hosts are made once, provisioned once
(`provisioned`), and the later tests reuse them. h1 is Debian 12; h2 is the same Debian rootfs
with Ubuntu 22.04's /etc/os-release (hosts.pretend_ubuntu_2204), so the one provisioning run, given
no stack flags, resolves two different stacks from two hosts' facts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, require, run_gpuenv
from tests.provision import hosts as test_hosts

# The main run passes no stack flag: each host's stack comes from its facts and the wheelhouse
# (torch 2.13.0+cpu for cp311, gpuenv's dependencies; tests/infra/prepare.sh makes it).
STACK_ARGS: tuple[str, ...] = ()


@pytest.fixture(scope="session")
def ssh_hosts(bookworm_rootfs_tar: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[test_hosts.HostSet]:
    ok, reason = test_hosts.available()
    require(ok, reason)
    require(
        shutil.which("ansible-playbook") is not None or (REPO / ".venv/bin/ansible-playbook").exists(),
        "ansible-core is not installed",
    )
    hosts = test_hosts.make_hosts(bookworm_rootfs_tar, tmp_path_factory.mktemp("ssh-hosts"), ["h1", "h2"])
    try:
        test_hosts.pretend_ubuntu_2204(hosts.hosts[1])
        yield hosts
    finally:
        test_hosts.stop_hosts(hosts)


@dataclass
class Provisioned:
    hosts: test_hosts.HostSet
    result: subprocess.CompletedProcess[str]
    summary: dict[str, dict[str, object]]
    reports: Path
    artifacts: Path
    workdir: Path

    def args(self, inventory: Path, *extra: str) -> list[str]:
        return [
            "provision",
            "-i",
            str(inventory),
            *STACK_ARGS,
            "--wheelhouse",
            str(self.wheelhouse),
            "--gpuenv-wheel",
            str(self.wheel),
            "--reports-dir",
            str(self.reports),
            "--json",
            "--verify-device",
            "cpu",
            *extra,
        ]

    wheelhouse: Path = Path()
    wheel: Path = Path()  # built once, so both runs install the same gpuenv
    dry_run: subprocess.CompletedProcess[str] | None = None  # --dry-run on h1 while it was still bare
    left_after_dry_run: tuple[str, ...] = ()  # what the dry run left on h1 (nothing, it should be)


@pytest.fixture(scope="session")
def provisioned(
    ssh_hosts: test_hosts.HostSet, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory
) -> Provisioned:
    """The first, real run: both hosts plus one unreachable address, from the cached wheelhouse."""
    work = tmp_path_factory.mktemp("provision")
    inventory = work / "hosts.ini"
    inventory.write_text(ssh_hosts.inventory(unreachable=True))
    from gpuenv.selfwheel import build_own_wheel

    state = Provisioned(
        ssh_hosts,
        subprocess.CompletedProcess([], 0),
        {},
        work / "reports",
        work / "artifacts",
        work,
        wheelhouse,
        build_own_wheel(work / "wheel"),
    )
    env = {**ssh_hosts.env(), "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    bare = work / "bare.ini"
    bare.write_text(ssh_hosts.inventory(["h1"]))
    state.dry_run = run_gpuenv(*state.args(bare, "--dry-run"), env=env, timeout=600)
    h1 = ssh_hosts.hosts[0].root
    state.left_after_dry_run = tuple(p for p in ("opt/gpuenv", "usr/bin/gcc", "var/cache/gpuenv") if (h1 / p).exists())
    state.result = run_gpuenv(*state.args(inventory, "--artifacts-dir", str(state.artifacts)), env=env, timeout=1200)
    try:
        doc = json.loads(state.result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"provision printed no JSON (rc {state.result.returncode}): {state.result.stderr[-3000:]}")
    state.summary = {h["host"]: h for h in doc["hosts"]}
    return state
