"""A config file carries the SSH settings of a fleet: used against a real test host."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import REPO, run_gpuenv
from tests.provision import hosts as test_hosts


def test_ssh_settings_from_the_config_file_reach_the_host(ssh_hosts: test_hosts.HostSet, tmp_path: Path) -> None:
    h1 = ssh_hosts.hosts[0]
    # The inventory names the host only; user, port, key and become come from the file.
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"[gpu]\n{h1.name} ansible_host={h1.address} ansible_python_interpreter=/usr/bin/python3\n")
    secret = tmp_path / "become"
    secret.write_text(test_hosts.ROOT_PASSWORD + "\n")
    secret.chmod(0o600)
    file = tmp_path / "config.toml"
    file.write_text(
        "[provision]\n"
        f'inventory = "{inventory}"\n'
        'user = "deploy"\n'
        f"port = {h1.port}\n"
        f'ssh-key = "{ssh_hosts.key}"\n'
        'become-method = "su"\n'
        f'become-password-file = "{secret}"\n'
        'os = "debian12"\n'
        'python = "3.11"\n'
        "json = true\n"
    )
    log = ssh_hosts.workdir / f"{h1.name}-sshd.log"
    seen = log.stat().st_size
    env = {**ssh_hosts.env(), "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = run_gpuenv("--config", str(file), "provision", "--plan", env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    doc = json.loads(result.stdout)  # json = true came from the file
    assert doc["plans"][h1.name]["action"] == "skip"  # facts were gathered as root, through su
    assert doc["hosts"][0]["unreachable"] == 0 and doc["hosts"][0]["failed"] == 0
    with log.open("rb") as handle:
        handle.seek(seen)
        logins = handle.read().decode(errors="replace")
    assert "Accepted publickey for deploy from 127.0.0.1" in logins, logins[-2000:]
    assert "for root from" not in logins
    assert test_hosts.ROOT_PASSWORD not in result.stdout + result.stderr
