"""provision's site_checks role, run for real on this machine (a local connection): the site's checks
directory shipped root's and writable by root alone (what it no longer has removed), a site check
package installed into a venv; the directory it makes is one verify trusts and runs."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuenv.adapters.ansible import run_playbook
from gpuenv.ansible.runner import RunRequest, controller_path, runner_arguments
from gpuenv.provision.variables import ProvisionOptions, site_variables
from gpuenv.resources import shipped_dir
from tests.conftest import require, run_gpuenv
from tests.verify.site_package import EXAMPLE, build_wheel

PROGRAM = '#!/bin/sh\n# gpuenv-check: name = "mounted"\n# gpuenv-check: timeout = 5\necho "OK - mounted"\n'


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    require(shutil.which("ansible-playbook", path=controller_path()) is not None, "ansible-core is not installed")
    work = tmp_path_factory.mktemp("site-role")
    source = work / "checks.d"
    source.mkdir()
    (source / "mounted").write_text(PROGRAM)
    shutil.copy("/bin/true", source / "fabric")
    (source / "fabric.toml").write_text('name = "fabric"\ntimeout = 5\n')
    for name in ("mounted", "fabric"):
        (source / name).chmod(0o755)
    dest, cache, venv = work / "host" / "checks.d", work / "host" / "cache", work / "host" / "venv"
    dest.mkdir(parents=True)
    cache.mkdir()
    (dest / "dropped").write_text("#!/bin/sh\nexit 2\n")  # a check the site no longer ships
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    wheel = build_wheel(EXAMPLE, work)
    options = ProvisionOptions(
        site_checks_dir=str(source),
        site_checks_files=("fabric", "fabric.toml", "mounted"),
        site_checks_wheels=(str(wheel),),
    )
    values = site_variables(options) | {
        "site_checks_dest": str(dest),
        "site_checks_cache": str(cache),
        "site_checks_venv": str(venv),
        "site_checks_pip_source": "--no-deps --no-index",  # the example needs gpuenv, which a host's venv has
    }
    project = work / "project"
    shutil.copytree(shipped_dir("playbooks"), project, ignore=shutil.ignore_patterns("__pycache__"))
    (project / "group_vars/all").mkdir(parents=True)
    (project / "group_vars/all/gpuenv.yml").write_text(
        "---\n" + "".join(f"{k}: {json.dumps(v)}\n" for k, v in values.items())
    )
    python = shutil.which("python3", path=controller_path()) or "/usr/bin/python3"
    host = {"ansible_connection": "local", "ansible_python_interpreter": python}
    (project / "inventory").mkdir()
    (project / "inventory/hosts.yml").write_text(json.dumps({"all": {"hosts": {"node": host}}}))
    (project / "ship.yml").write_text(
        "---\n- name: Ship\n  hosts: all\n  gather_facts: false\n  roles: [site_checks]\n"
    )
    request = RunRequest(
        project_dir=project, private_data_dir=work / "run", playbook="ship.yml", path=controller_path()
    )
    outcome = run_playbook(runner_arguments(request))
    return {"outcome": outcome, "dest": dest, "venv": venv, "values": values}


def test_the_checks_directory_is_shipped_roots_and_nothing_else_stays(shipped: dict[str, Any]) -> None:
    assert not shipped["outcome"].tally.hosts["node"].failed, shipped["outcome"].tally.hosts["node"].message
    dest: Path = shipped["dest"]
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in dest.iterdir()}
    assert modes == {"fabric": 0o755, "fabric.toml": 0o644, "mounted": 0o755}
    assert {p.stat().st_uid for p in dest.iterdir()} == {0} and stat.S_IMODE(dest.stat().st_mode) == 0o755
    assert shipped["values"]["verify_site_args"] == ["--checks-dir", "/etc/gpuenv/checks.d", "--all-plugins"]
    out = run_gpuenv("verify", "--device", "cpu", "--json", "--checks-dir", str(dest), "--check", "site.mounted",
                     "--check", "site.fabric")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert [c["status"] for c in json.loads(out.stdout)["checks"]] == ["pass", "pass"]


def test_the_site_check_package_is_installed_into_the_venv(shipped: dict[str, Any]) -> None:
    venv: Path = shipped["venv"]
    (points,) = venv.glob("lib/python*/site-packages/example_site_checks-1.0.dist-info/entry_points.txt")
    assert "scratch = example_site_checks.scratch:check" in points.read_text()
    assert os.access(next(venv.glob("lib/python*/site-packages/example_site_checks/scratch.py")), os.R_OK)
