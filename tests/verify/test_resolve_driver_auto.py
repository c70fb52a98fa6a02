"""`gpuenv resolve --driver auto` (and uv's `--torch-backend auto`) reads this machine's driver through the real
pynvml bindings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import run_gpuenv
from tests.verify.conftest import scenario_env


def test_driver_auto_reads_nvml(fake_nvml_dir: Path) -> None:
    out = run_gpuenv("resolve", "--driver", "auto", "--json", env=scenario_env(fake_nvml_dir, "healthy-8xh100"))
    assert out.returncode == 0, out.stderr
    stack = json.loads(out.stdout)
    assert "580.65.06" in stack["reasons"]["driver"]
    # 580.65.06 is older than the 580.126.20 that CUDA 13.0.3 ships, so cu130 would run only through
    # minor-version compatibility: the newest release's build it runs natively wins
    assert stack["build"] == "cu126"


def test_driver_auto_with_driver_not_loaded(debian_nvml_dir: Path) -> None:
    out = run_gpuenv("resolve", "--driver", "auto", env={"LD_LIBRARY_PATH": str(debian_nvml_dir)})
    assert out.returncode == 3
    assert "driver-not-loaded" in out.stderr


def _stack(*args: str, env: dict[str, str]) -> dict[str, Any]:
    out = run_gpuenv("resolve", *args, "--json", env=env)
    assert out.returncode == 0, out.stderr
    stack: dict[str, Any] = json.loads(out.stdout)
    return stack


def test_torch_backend_auto_is_this_machines_driver(fake_nvml_dir: Path) -> None:
    env = scenario_env(fake_nvml_dir, "healthy-8xh100")
    auto = _stack("--torch-backend", "auto", env=env)
    assert auto == _stack("--driver", "auto", env=env) and "580.65.06" in auto["reasons"]["driver"]


def test_torch_backend_auto_without_a_driver_points_at_the_cpu_stack(tmp_path: Path) -> None:
    done = run_gpuenv("resolve", "--torch-backend", "auto", env={"LD_LIBRARY_PATH": str(tmp_path)})
    assert done.returncode == 3 and "no NVIDIA driver found" in done.stderr and "--platform cpu" in done.stderr
