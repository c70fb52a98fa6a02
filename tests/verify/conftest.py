"""Fixtures for the verify tests: the fake libnvidia-ml.so.1 (compiled here from C with gcc) and
Debian's real libnvidia-ml1 unpacked by tests/infra/prepare.sh."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CACHE, require, run_gpuenv

HERE = Path(__file__).resolve().parent
FAKE_NVML = HERE / "fake_nvml"


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the fake libnvidia-ml.so.1, for LD_LIBRARY_PATH."""
    require(shutil.which("gcc") is not None, "needs gcc to build the fake libnvidia-ml.so.1")
    out = tmp_path_factory.mktemp("fake-nvml")
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-Wall",
            "-Werror",
            "-O1",
            "-o",
            str(out / "libnvidia-ml.so.1"),
            str(FAKE_NVML / "fake_nvml.c"),
        ],
        check=True,
        timeout=60,
    )
    return out


@pytest.fixture(scope="session")
def debian_nvml_dir() -> Path:
    """Debian's libnvidia-ml1 (535.x) unpacked, not installed: the kernel driver is not loaded."""
    found = sorted((CACHE / "nvidia" / "libnvidia-ml1" / "root").glob("usr/lib/*/nvidia/current/libnvidia-ml.so.1"))
    require(bool(found), f"no unpacked libnvidia-ml1 under {CACHE}/nvidia (run scripts/test.sh as root)")
    return found[0].parent


def verify_json(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> tuple[int, dict[str, Any], str]:
    """Run the real `gpuenv verify ... --json`; (exit code, report, stderr)."""
    proc = run_gpuenv("verify", *args, "--json", env=env, timeout=timeout)
    try:
        report = json.loads(proc.stdout)
    except ValueError as exc:
        raise AssertionError(
            f"no JSON report (exit {proc.returncode}): {proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        ) from exc
    return proc.returncode, report, proc.stderr


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == name)


def scenario_env(lib_dir: Path, scenario: str) -> dict[str, str]:
    return {"LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_SCENARIO": str(FAKE_NVML / f"{scenario}.scenario")}
