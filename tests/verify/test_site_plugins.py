"""Site checks from Python packages, through the CLI: the documented example package (and two
small ones made here) built into wheels, installed with pip into a folder on PYTHONPATH, found as
entry points in gpuenv.checks and run in verify's watchdogged worker."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_gpuenv
from tests.verify.site_package import EXAMPLE, build_wheel, install
from tests.verify.test_site_programs import checks_of, marked, valid_report

QUIRKY = '''"""Site checks that misbehave, each in its own way."""

from gpuenv.sitecheck import Check, Result


def _raise(ctx):
    raise RuntimeError("the fabric manager socket is gone")


def _dict(ctx):
    return {"status": "pass"}


def _gpu(ctx):
    return Result(status="pass")


boom = Check(name="boom", run=_raise, timeout=10)
liar = Check(name="liar", run=_dict, timeout=10)
gpu = Check(name="gpu", run=_gpu, timeout=10, needs=("gpu",), about="runs on GPUs only")
'''
BROKEN = '''"""Entry points that name no proper check."""

from gpuenv.sitecheck import Check, Result

renamed = Check(name="other", run=lambda ctx: Result(), timeout=5)
number = 42
'''


def project(root: Path, name: str, module: str, source: str, points: dict[str, str]) -> Path:
    (root / "src" / module).mkdir(parents=True)
    (root / "src" / module / "__init__.py").write_text(source)
    lines = "".join(f'{key} = "{value}"\n' for key, value in points.items())
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "0.1"\n\n[project.entry-points."gpuenv.checks"]\n{lines}'
    )
    return root


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PYTHONPATH folders: `good` holds the example package and the quirky one; `broken` entry points
    that name no check, or a module that does not exist."""
    root = tmp_path_factory.mktemp("site-packages")
    wheels = root / "wheels"
    wheels.mkdir()
    quirky = project(root / "quirky", "quirky-checks", "quirky_checks", QUIRKY, {
        "boom": "quirky_checks:boom", "liar": "quirky_checks:liar", "gpu": "quirky_checks:gpu",
    })  # fmt: skip
    broken = project(root / "broken", "broken-checks", "broken_checks", BROKEN, {
        "renamed": "broken_checks:renamed", "number": "broken_checks:number", "gone": "broken_checks.nowhere:check",
    })  # fmt: skip
    good, bad = root / "good", root / "bad"
    for wheel in (build_wheel(EXAMPLE, wheels), build_wheel(quirky, wheels)):
        install(wheel, good)
    install(build_wheel(broken, wheels), bad)
    return {"good": str(good), "broken": str(bad)}


def verify(path: str, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = run_gpuenv("verify", "--device", "cpu", "--json", *args, env={"PYTHONPATH": path, **env})
    return out, json.loads(out.stdout) if out.stdout.strip() else {}


def test_the_example_package_runs_in_the_verdict_with_its_figure(installed: dict[str, str], tmp_path: Path) -> None:
    out, report = verify(installed["good"], "--plugin", "scratch", "--check", "site.scratch", SCRATCH_DIR=str(tmp_path))
    assert out.returncode == 0, out.stderr
    valid_report(report)
    check = checks_of(report)["site.scratch"]
    assert check["status"] == "pass" and check["summary"].startswith(f"{tmp_path}: 16 MiB written at ")
    assert check["metrics"]["write_mib_per_s"] > 0
    assert check["figures"] == {"write_mib_per_s": {"unit": "MiB/s", "better": "higher", "per_gpu": False}}
    assert check["detail"]["origin"] == "entry point example_site_checks.scratch:check (example_site_checks 1.0)"
    assert report["options"]["checks"] == ["site.scratch"]
    assert not list(tmp_path.iterdir())  # the check cleans up after itself


def test_its_failure_is_its_own_finding(installed: dict[str, str], tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    out, report = verify(installed["good"], "--all-plugins", "--check", "site.scratch", SCRATCH_DIR=str(gone))
    assert out.returncode == 1, out.stderr
    check = checks_of(report)["site.scratch"]
    assert check["status"] == "fail"
    (finding,) = check["findings"]
    assert finding["code"] == "site.scratch.missing" and finding["message"] == f"{gone} is not there"
    assert finding["remediation"] == "mount the scratch file system"


def test_a_hung_plugin_is_killed_at_its_limit_with_the_worker(installed: dict[str, str]) -> None:
    mark = uuid.uuid4().hex
    fault = {"GPUENV_TEST_FAULT": "site.scratch:hang", "GPUENV_TEST_MARK": mark}
    out, report = verify(installed["good"], "--plugin", "scratch", "--check", "site.scratch", "--timeout", "3", **fault)
    assert out.returncode == 1, out.stderr
    check = checks_of(report)["site.scratch"]
    assert check["status"] == "timeout" and "ran past its 3 s limit" in check["summary"]
    assert marked(f"GPUENV_TEST_MARK={mark}") == []


def test_a_raising_plugin_is_a_crash_and_a_wrong_answer_an_error(installed: dict[str, str]) -> None:
    args = ("--plugin", "boom", "--plugin", "liar", "--plugin", "gpu", "--check", "site.boom", "--check", "site.liar")
    out, report = verify(installed["good"], *args, "--check", "site.gpu")
    assert out.returncode == 1, out.stderr
    valid_report(report)
    checks = checks_of(report)
    assert checks["site.boom"]["status"] == "crash"
    assert checks["site.boom"]["summary"] == "site.boom crashed: RuntimeError: the fabric manager socket is gone"
    assert "raise RuntimeError" in checks["site.boom"]["detail"]["traceback"]
    assert checks["site.liar"]["status"] == "error"
    assert checks["site.liar"]["summary"] == "run() returned a dict, not a gpuenv.sitecheck.Result"
    assert checks["site.gpu"]["status"] == "skip"


def test_info_lists_the_entry_points_and_list_checks_says_where_each_check_comes_from(
    installed: dict[str, str],
) -> None:
    out = run_gpuenv("info", "--json", env={"PYTHONPATH": installed["good"]})
    assert out.returncode == 0, out.stderr
    points = {p["name"]: p for p in json.loads(out.stdout)["site_checks"]}
    assert set(points) == {"scratch", "boom", "liar", "gpu"}
    assert points["scratch"] == {
        "name": "scratch",
        "value": "example_site_checks.scratch:check",
        "distribution": "example_site_checks",
        "version": "1.0",
    }
    out = run_gpuenv("verify", "--list-checks", "--plugin", "scratch", env={"PYTHONPATH": installed["good"]})
    assert out.returncode == 0, out.stderr
    assert "site.scratch" in out.stdout and "entry point example_site_checks.scratch:check" in out.stdout


@pytest.mark.parametrize(
    ("plugin", "code", "says"),
    [
        ("renamed", 2, "declares the name 'other': the entry point must carry it"),
        ("number", 2, "is of type int, not a gpuenv.sitecheck.Check"),
        ("gone", 3, "cannot be loaded: ModuleNotFoundError: No module named 'broken_checks.nowhere'"),
        ("absent", 2, "--plugin absent: no entry point of that name in gpuenv.checks (installed: gone, number, rena"),
    ],
)
def test_an_entry_point_that_names_no_proper_check_is_refused(
    installed: dict[str, str], plugin: str, code: int, says: str
) -> None:
    out, _ = verify(installed["broken"], "--plugin", plugin)
    assert out.returncode == code, out.stderr
    assert says in out.stderr and "Traceback" not in out.stderr


def test_nothing_is_imported_unless_enabled(installed: dict[str, str], tmp_path: Path) -> None:
    """The broken package's entry points are never imported by a run that does not enable them."""
    folder = tmp_path / "checks.d"
    folder.mkdir()
    (folder / "ok").write_text('#!/bin/sh\n# gpuenv-check: name = "ok"\n# gpuenv-check: timeout = 5\n')
    os.chmod(folder / "ok", 0o755)
    out, report = verify(installed["broken"], "--checks-dir", str(folder), "--check", "site.ok")
    assert out.returncode == 0, out.stderr
    assert [c["name"] for c in report["checks"]] == ["site.ok"]
