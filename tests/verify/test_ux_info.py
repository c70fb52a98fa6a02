"""`gpuenv info`: this machine's GPUs, driver, torch and resolved stack, through the real CLI, over the
fake libnvidia-ml.so.1 and without NVML; torch's version from its metadata, torch never imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from gpuenv.verify.pci import TEST_SYSFS_ENV
from tests.conftest import run_gpuenv
from tests.verify.conftest import fake_sysfs, scenario_env


def test_info_json_names_the_gpus_driver_torch_and_the_stack_for_them(fake_nvml_dir: Path) -> None:
    proc = run_gpuenv("info", "--json", env=scenario_env(fake_nvml_dir, "healthy-8xh100"))
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["schema"] == "gpuenv.info/1" and found["nvml"] == "ok"
    assert (found["driver"], found["cuda_driver"]) == ("580.65.06", "13.0")
    assert [g["name"] for g in found["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 8
    assert found["torch"] == metadata.version("torch")
    assert found["stack_request"]["driver"] == "580.65.06" and found["stack_request"]["gpu"] == "sm_90"
    assert found["stack"]["gpu_sm"] == "9.0" and found["stack"]["schema"] == "gpuenv.stack/2"
    assert found["stack_note"].startswith("gpuenv resolve --driver 580.65.06 --gpu sm_90")


def test_info_text_is_one_fact_a_line(fake_nvml_dir: Path) -> None:
    proc = run_gpuenv("info", env=scenario_env(fake_nvml_dir, "healthy-8xh100"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1] == "NVML     ok"
    assert lines[2] == "driver   580.65.06 (runs CUDA up to 13.0)"
    assert lines[3] == "GPUs     8 × NVIDIA H100 80GB HBM3"
    assert "  0  NVIDIA H100 80GB HBM3  sm_90  00000000:18:00.0" in lines[4]
    assert f"torch    {metadata.version('torch')}" in lines
    assert any(line.startswith("stack    torch ") for line in lines)


def _info_without_nvml(tmp_path: Path, devices: dict[str, tuple[str, str]]) -> dict[str, Any]:
    sysfs = fake_sysfs(tmp_path / "sysfs", devices)
    proc = run_gpuenv("info", "--json", env={"LD_LIBRARY_PATH": str(tmp_path), TEST_SYSFS_ENV: str(sysfs)})
    assert proc.returncode == 0, proc.stderr
    found: dict[str, Any] = json.loads(proc.stdout)
    assert found["nvml"] == "library-not-found" and found["gpus"] == [] and found["driver"] is None
    assert "driver" not in found["stack_request"]
    return found


def test_info_without_nvml_but_nvidia_gpus_on_the_bus_resolves_cuda_for_this_os(tmp_path: Path) -> None:
    found = _info_without_nvml(tmp_path, {"0000:18:00.0": ("0x10de", "0x030200")})
    assert "platform" not in found["stack_request"] and "no NVIDIA driver found" in found["stack_note"]
    assert found["stack"]["platform"] == "cuda"


def test_info_on_a_machine_without_a_gpu_suggests_the_cpu_stack(tmp_path: Path) -> None:
    found = _info_without_nvml(tmp_path, {"0000:00:1f.3": ("0x8086", "0x040300")})  # an Intel sound card, no GPU
    assert found["stack_request"]["platform"] == "cpu" and found["stack"]["platform"] == "cpu"
    assert found["stack"]["index_url"].endswith("/whl/cpu")
    assert "--platform cpu" in found["stack_note"] and "no GPU on the PCI bus" in found["stack_note"]
    text = run_gpuenv("info", env={"LD_LIBRARY_PATH": str(tmp_path), TEST_SYSFS_ENV: str(tmp_path / "sysfs")})
    assert any(line.startswith("stack    torch ") and "(cpu), CPU only" in line for line in text.stdout.splitlines())


def test_info_with_amd_gpus_on_the_bus_suggests_their_rocm_stack(tmp_path: Path) -> None:
    found = _info_without_nvml(tmp_path, {"0000:05:00.0": ("0x1002", "0x120000")})  # an MI300X, an accelerator
    assert found["stack_request"]["platform"] == "rocm" and found["stack"]["platform"] == "rocm"


def test_info_imports_no_torch(fake_nvml_dir: Path) -> None:
    code = (
        "import sys; from gpuenv.cli import _run; code = _run(['info', '--json'], debug=False); "
        "sys.stderr.write(repr(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))); sys.exit(code)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **scenario_env(fake_nvml_dir, "healthy-8xh100")},
    )
    assert proc.returncode == 0 and proc.stderr == "[]", proc.stderr
    assert json.loads(proc.stdout)["torch"] == metadata.version("torch")
