"""On a machine with NVIDIA GPUs: the CUDA paths (NCCL collectives, CUDA profiler events, fp16
GradScaler on CUDA, cuDNN convolution, GPU memory). Skipped with a reason elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_gpuenv
from tests.verify.conftest import check


def cuda_gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.version.cuda and torch.cuda.is_available() else 0


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(cuda_gpus() == 0, reason="needs an NVIDIA GPU and a CUDA build of torch"),
]


def test_standard_level_certifies_this_gpu_node(tmp_path: Path) -> None:
    report_path = tmp_path / "verify.json"
    proc = run_gpuenv("verify", "--level", "standard", "--device", "cuda", "--report", str(report_path), timeout=900)
    report = json.loads(report_path.read_text())
    assert proc.returncode == 0, json.dumps(report["checks"], indent=1)[-6000:]
    assert report["device"] == "cuda" and not report["cpu_only"]
    assert check(report, "allreduce")["metrics"]["backend"] == "nccl"
    assert check(report, "profiler")["metrics"]["cuda_events"] > 0
    assert not any("fp16" in s for s in check(report, "amp")["detail"]["skipped"])
    assert len(report["host"]["gpus"]) == cuda_gpus()
