"""The wheel carries every data file it needs; installed outside the checkout it still works."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpuenv.selfwheel import build_own_wheel
from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.integration]  # builds and installs wheels in venvs


def _venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    return where / "bin"


def _check_installed(bin_dir: Path, cwd: Path) -> None:
    out = subprocess.run(
        [str(bin_dir / "gpuenv"), "resolve", "--cuda", "11.7", "--json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["build"] == "cu117"
    probe = (
        "from gpuenv.resources import shipped_dir, data_file; import sys; "
        "print(all(shipped_dir(n).is_dir() for n in ('templates','playbooks','images')), "
        "data_file('compat.json').is_file(), shipped_dir('templates'))"
    )
    out = subprocess.run([str(bin_dir / "python"), "-c", probe], capture_output=True, text=True, cwd=cwd, timeout=60)
    assert out.stdout.startswith("True True"), out.stdout + out.stderr
    assert str(REPO) not in out.stdout  # served from the installed package, not the checkout


def test_built_wheel_installs_and_runs_outside_checkout(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(dist.glob("gpuenv-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpuenv/data/compat.json" in names and "gpuenv/py.typed" in names
    assert any(n.startswith("gpuenv/_shipped/templates/") for n in names)
    bin_dir = _venv(tmp_path / "venv")
    subprocess.run([str(bin_dir / "pip"), "install", "-q", str(wheel)], check=True, timeout=300)
    _check_installed(bin_dir, tmp_path)


def test_self_wheel_is_reproducible_and_complete(tmp_path: Path, wheelhouse: Path) -> None:
    first = build_own_wheel(tmp_path / "a")
    second = build_own_wheel(tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()
    names = zipfile.ZipFile(first).namelist()
    assert any(n.startswith("gpuenv/_shipped/playbooks/") for n in names)
    bin_dir = _venv(tmp_path / "venv")
    subprocess.run(
        [str(bin_dir / "pip"), "install", "-q", "--no-index", "--find-links", str(wheelhouse), str(first)],
        check=True,
        timeout=300,
    )
    _check_installed(bin_dir, tmp_path)
