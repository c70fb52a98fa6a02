"""On a machine with AMD Instinct GPUs (an MI300X node) and a ROCm build of torch: the nvml check
reads the real AMD SMI, the FP8 check takes gfx942's format, torch's GPU work runs on ROCm.
Skipped with a reason elsewhere, without importing torch where no AMD GPU is on the PCI bus.

This process never touches the GPUs: every question to torch runs in a child process."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from typing import Any

import pytest

from gpuenv.verify.pci import amd_on_pci
from tests.conftest import run_gpuenv
from tests.verify.conftest import check

ROCM_GPUS = "import torch; print(torch.cuda.device_count() if torch.version.hip and torch.cuda.is_available() else 0)"


@functools.cache
def rocm_gpus() -> int:
    if not amd_on_pci():
        return 0
    try:
        proc = subprocess.run([sys.executable, "-c", ROCM_GPUS], capture_output=True, text=True, timeout=300)
        return int(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError, subprocess.TimeoutExpired):  # no torch: no GPU test
        return 0


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(rocm_gpus() == 0, reason="needs AMD Instinct GPUs, AMD SMI and a ROCm build of torch"),
]


def verify(*args: str) -> tuple[int, dict[str, Any]]:
    proc = run_gpuenv("verify", *args, "--json", timeout=900)
    return proc.returncode, json.loads(proc.stdout)


def test_the_nvml_check_reads_amd_smi_on_every_gpu() -> None:
    code, report = verify("--check", "nvml", "--expect-gpus", str(rocm_gpus()))
    nvml = check(report, "nvml")
    assert code == 0 and nvml["status"] in ("pass", "warn"), nvml["summary"]
    assert nvml["metrics"]["smi"] == "amdsmi" and nvml["metrics"]["driver"]
    assert "AMD GPU(s) on the PCI bus" in report["host"]["device_decision"]
    for gpu in nvml["detail"]["snapshot"]["gpus"]:
        assert gpu["gfx"] and gpu["uuid"] and gpu["pci_bus_id"], gpu
        assert gpu["ras"] is not None and gpu["temperature"] and gpu["slowdown_temperature"], gpu
        assert gpu["power"]["enforced_mw"] and gpu["power"]["default_mw"], gpu
        assert gpu["links"] is not None or "xgmi" in gpu["unread"], gpu
        assert not [f for f in gpu["unread"].values() if f["class"] != "absent"], gpu["unread"]  # every call answered


def test_the_passive_check_reads_amd_smi_without_load() -> None:
    code, report = verify("--check", "nvml", "--passive")
    assert code == 0 and report["host"]["device_decision"].startswith("passive: AMD SMI ok")


def test_fp8_takes_the_format_of_the_architecture() -> None:
    code, report = verify("--check", "fp8", "--level", "deep")
    fp8 = check(report, "fp8")
    gfx = {g["gfx"] for g in report["host"]["gpus"]}
    if gfx == {"gfx942"}:  # MI300X, MI300A, MI325X
        assert code == 0 and fp8["status"] in ("pass", "warn"), fp8["summary"]
        assert fp8["metrics"]["formats"] == ["float8_e4m3fnuz"]
    elif gfx == {"gfx90a"}:  # MI200: no FP8
        assert fp8["status"] == "skip" and "gfx90a" in fp8["summary"]


def test_amp_trains_on_rocm() -> None:
    code, report = verify("--check", "amp")
    amp = check(report, "amp")
    assert code == 0 and amp["status"] in ("pass", "warn"), amp["summary"]
    assert report["device"] == "cuda" and not report["cpu_only"]
