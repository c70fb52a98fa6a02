"""The provision command's contract without hosts: bad input exits 2 writing nothing, Ansible missing
or broken exits 3, the rendered project passes ansible-playbook --syntax-check (ansible-lint's
production profile runs in `nox -s lint`, with --strict)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuenv.adapters.ansible import run_playbook
from gpuenv.ansible.runner import RunRequest, runner_arguments
from gpuenv.errors import CannotRun
from tests.conftest import require, run_gpuenv

STACK = ("--os", "debian12", "--python", "3.11", "--torch", "2.13.0")
VENV_BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = shutil.which(name, path=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    require(path is not None, f"{name} is not installed")
    return str(path)


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert lines and lines[0].startswith("gpuenv: error: "), result.stderr
    assert len(lines) <= 2 and (len(lines) == 1 or lines[1].startswith("  hint: ")), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ("gpu01;reboot",),
        ("$(touch /tmp/pwned)",),
        ("gpu01", "--user", "root;id"),
        ("gpu01", "--port", "70000"),
        ("gpu01", "--venv", "/opt/$(id)"),
        ("gpu01", "--limit", "a;b"),
        ("gpu01", "--index-url", "file:///etc/passwd"),
        ("gpu01", "--driver-branch", "580;id"),
        ("gpu01", "--torch", "2.x"),
    ],
)
def test_bad_values_exit_2_and_write_nothing(tmp_path: Path, args: tuple[str, ...]) -> None:
    out = tmp_path / "project"
    result = run_gpuenv("provision", *args, "--render-only", str(out), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    _one_error_line(result)
    assert not out.exists()
    assert not Path("/tmp/pwned").exists()


def test_inventory_errors_name_the_line(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu]\ngpu01\ngpu02 ansible_port=22 ansible_host=`id`\n")
    result = run_gpuenv("provision", "-i", str(inventory), *STACK, "--render-only", str(tmp_path / "p"))
    assert result.returncode == 2
    assert f"{inventory}: host gpu02, variable ansible_host" in _one_error_line(result)
    assert not (tmp_path / "p").exists()


def test_conflicting_options_exit_2(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("x\n")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("gpu01\n")
    for args in (
        ("gpu01", "-i", str(inventory)),
        ("gpu01", "--become-password-file", str(secret), "-K"),
        ("--become-password-file", str(secret)),
    ):
        result = run_gpuenv("provision", *args, *STACK, "--render-only", str(tmp_path / "p"))
        assert result.returncode == 2, (args, result.stderr)
        _one_error_line(result)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    result = run_gpuenv("provision", "gpu01", *STACK, "--render-only", str(tmp_path / "full"))
    assert result.returncode == 2 and "not empty" in _one_error_line(result)


def test_missing_ansible_runner_exits_3(tmp_path: Path) -> None:
    # A package that fails to import stands for ansible-runner being absent from the controller.
    shim = tmp_path / "shim" / "ansible_runner"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named ansible_runner')\n")
    result = run_gpuenv(
        "provision", "gpu01", *STACK, "--skip-verify", env={"PYTHONPATH": str(shim.parent)}, cwd=tmp_path
    )
    assert result.returncode == 3, result.stderr
    assert "needs ansible-runner, which is not installed" in _one_error_line(result)


def test_ansible_playbook_missing_or_broken_is_cannot_run(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "inventory").mkdir(parents=True)
    inventory = "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
    (project / "inventory" / "hosts.yml").write_text(inventory)
    (project / "ansible.cfg").write_text("[defaults]\n")
    (project / "site.yml").write_text("- hosts: all\n  tasks:\n    - name: broken\n      no.such.module: {}\n")
    request = RunRequest(project_dir=project, private_data_dir=tmp_path, path="/nonexistent")
    with pytest.raises(CannotRun, match="not on PATH"):
        run_playbook(runner_arguments(request))
    _tool("ansible-playbook")
    request = RunRequest(project_dir=project, private_data_dir=tmp_path, path=f"{VENV_BIN}{os.pathsep}/usr/bin:/bin")
    with pytest.raises(CannotRun, match="stopped before running on any host"):
        run_playbook(runner_arguments(request))


def test_render_only_is_a_self_contained_project(tmp_path: Path) -> None:
    playbook = _tool("ansible-playbook")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    gpu:\n      hosts:\n        gpu01: {ansible_host: 10.0.0.1}\n")
    out = tmp_path / "project"
    result = run_gpuenv("provision", "-i", str(inventory), *STACK, "--user", "ubuntu", "--render-only", str(out))
    assert result.returncode == 0, result.stderr
    assert len(list((out / "files").glob("gpuenv-*.whl"))) == 1
    assert "ansible_become: true" in (out / "inventory/hosts.yml").read_text()
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in ("site.yml", "plan_driver.yml"):
        check = subprocess.run(
            [playbook, "--syntax-check", name], cwd=out, capture_output=True, text=True, timeout=120, env=env
        )
        assert check.returncode == 0, check.stdout + check.stderr
    listed = subprocess.run(
        [playbook, "--list-hosts", "site.yml"], cwd=out, capture_output=True, text=True, timeout=120, env=env
    )
    assert "gpu01" in listed.stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--cuda", "13.0", "--driver-branch", "470"), "--driver-branch R470 cannot run CUDA 13.0"),
        (("--torch", "2.13.0", "--python", "3.9"), "no stack satisfies --torch 2.13.0, --python 3.9 on any OS"),
    ],
)
def test_a_request_that_contradicts_itself_exits_2_before_any_host(args: tuple[str, ...], said: str) -> None:
    # 127.0.0.250: nothing listens there; the request is refused before Ansible would try
    result = run_gpuenv("provision", "127.0.0.250", *args, timeout=60)
    assert result.returncode == 2, result.stderr
    assert said in _one_error_line(result)


def test_site_checks_are_checked_here_before_they_ship(tmp_path: Path) -> None:
    checks = tmp_path / "checks.d"
    checks.mkdir()
    (checks / "mounted").write_text('#!/bin/sh\n# gpuenv-check: name = "mounted"\n# gpuenv-check: timeout = 5\n')
    (checks / "mounted").chmod(0o755)
    checks.chmod(0o755)
    out = tmp_path / "project"
    result = run_gpuenv("provision", "gpu01", *STACK, "--site-checks-dir", str(checks), "--render-only", str(out))
    assert result.returncode == 0, result.stderr
    variables = (out / "group_vars" / "all" / "gpuenv.yml").read_text()
    assert 'site_checks_files: ["mounted"]' in variables
    assert 'verify_site_args: ["--checks-dir", "/etc/gpuenv/checks.d"]' in variables
    checks.chmod(0o777)
    result = run_gpuenv(
        "provision", "gpu01", *STACK, "--site-checks-dir", str(checks), "--render-only", str(tmp_path / "x")
    )
    assert result.returncode == 2
    assert "may be written by others (mode 0777): gpuenv runs nothing from it" in _one_error_line(result)
    assert not (tmp_path / "x").exists()
