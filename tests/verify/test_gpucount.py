"""--expect-gpus is checked whatever checks run, and an option without effect warns."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpuenv.verify import gpucount
from gpuenv.verify.facts import GpuInfo, HostFacts

EIGHT = HostFacts(nvml="ok", gpus=tuple(GpuInfo(i, i, "NVIDIA H100 80GB HBM3") for i in range(8)))


def test_fewer_gpus_than_expected_fails_and_names_the_count() -> None:
    found = gpucount.count_finding(8, 7, "NVML")
    assert found.code == "verify.gpu-count-short" and found.severity == "fail" and "7 GPU(s)" in found.message
    assert gpucount.count_finding(8, None, "NVML: library-not-found").severity == "fail"
    assert gpucount.count_finding(8, 8, "NVML").code == "verify.gpu-count"


def test_the_count_runs_whatever_checks_run() -> None:
    result = gpucount.run_findings(expect_gpus=8, baseline=None, checks=["allreduce"], host=EIGHT)
    assert result is not None and result.name == "verify" and result.status == "pass"
    short = gpucount.run_findings(expect_gpus=9, baseline=None, checks=["allreduce"], host=EIGHT)
    assert short is not None and short.status == "fail" and "--expect-gpus 9" in short.summary
    # the nvml check counts them itself (nvml.gpu_missing): not counted twice
    assert gpucount.run_findings(expect_gpus=9, baseline=None, checks=["nvml", "allreduce"], host=EIGHT) is None


def test_without_nvml_torch_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_run(cmd: list[str], **_kw: object) -> subprocess.CompletedProcess[str]:
        assert cmd[-1] == gpucount.TORCH_COUNT
        return subprocess.CompletedProcess(cmd, 0, "0\n", "")

    monkeypatch.setattr(gpucount.subprocess, "run", fake_run)
    counted, source = gpucount.count_gpus(HostFacts(nvml="library-not-found"))
    assert counted == 0 and "torch" in source and "library-not-found" in source


def test_an_option_without_effect_warns() -> None:
    result = gpucount.run_findings(expect_gpus=None, baseline="b.json", checks=["nvml", "stack"], host=EIGHT)
    assert result is not None and result.status == "warn"
    assert [f.code for f in result.findings] == ["verify.option-unused"] and "--baseline b.json" in result.summary
    assert gpucount.run_findings(expect_gpus=None, baseline="b.json", checks=["amp"], host=EIGHT) is None


@pytest.mark.cpu
def test_expect_gpus_fails_a_machine_without_gpus_whatever_checks_run() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuenv", "verify", "--expect-gpus", "8", "--check", "allreduce", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    first = report["checks"][0]
    assert first["name"] == "verify" and first["status"] == "fail"
    assert first["findings"][0]["code"] == "verify.gpu-count-short"
    assert report["checks"][1]["name"] == "allreduce" and report["checks"][1]["status"] == "pass"
