"""The GPU paths' logic on the CPU: per-device synchronisation, matmul figures by shape, one-rank
runs, arch-list parsing, full-fp32 settings and the profiler's advice (pure or CPU-only)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuenv.kb import load_kb
from gpuenv.verify import catalogue
from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.checks import amp, profiler
from gpuenv.verify.checks.allreduce import judging
from gpuenv.verify.checks.stack import evaluate as stack_evaluate
from gpuenv.verify.checks.stack import runs_as_ptx, runs_natively
from gpuenv.verify.context import CheckContext
from gpuenv.verify.facts import GpuInfo, HostFacts
from gpuenv.verify.model import GpuRef
from gpuenv.verify.workloads import common, throughput


@pytest.mark.torch  # imports torch in this process
def test_sync_waits_for_the_device_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    waited: list[Any] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    common.sync(torch.device("cuda", 3))
    common.sync(torch.device("cpu"))
    assert waited == [torch.device("cuda", 3)]  # GPU 3 itself, never the current device


def ctx(gpus: int = 4) -> CheckContext:
    host = HostFacts(gpus=tuple(GpuInfo(i, i, "NVIDIA H200", f"GPU-{i}", None, None, "9.0") for i in range(gpus)))
    return CheckContext("quick", "cuda", host=host)


def test_a_throttled_gpu_fails_against_its_peers_without_any_baseline() -> None:
    found = throughput.outlier_findings(
        {0: 700.0, 1: 690.0, 2: 420.0, 3: 705.0}, ctx(), below=0.75, shape="4096x4096x4096"
    )
    assert [(f.code, f.gpu.index if f.gpu else None) for f in found] == [("amp.tflops-outlier", 2)]
    assert "GPU-2" in found[0].message and "4096x4096x4096" in found[0].message
    assert throughput.outlier_findings({0: 700.0}, ctx(1), below=0.75, shape="4096x4096x4096") == []


def test_matmul_baselines_are_keyed_by_shape_and_part() -> None:
    base = load_baselines()
    assert base.expected_tflops("NVIDIA H200", "bf16") == 795  # the best-of-sweep reference row
    assert base.expected_tflops("NVIDIA H200", "bf16", "4096x4096x4096") is None  # no shape is judged by it
    assert base.expected_tflops("NVIDIA H200 NVL", "bf16") is None  # a 600 W part, not the SXM's figure
    assert base.expected_busbw("NVIDIA H200 NVL", 8, "allreduce", 1 << 30) is None
    assert base.expected_busbw("NVIDIA H200", 8, "allreduce", 1 << 30) == 366


@pytest.mark.torch  # imports torch in this process
def test_cpu_matmul_figure_and_work_count() -> None:
    import torch

    tflops, done = throughput.matmul_tflops(torch.device("cpu"), False, (128, 64, 32))
    assert 0 < tflops < 1000 and done == 4  # one warm-up product and three timed


def test_one_rank_reports_no_bandwidth_and_skips_ddp() -> None:
    result = {
        "rank": 0,
        "device": "cuda:0",
        "errors": [],
        "skipped": {},
        "pairs": [],
        "times": {"allreduce:1024": [1e-6]},
    }
    findings, metrics = judging.evaluate(
        [result], world=1, device="cuda", gpu_name="NVIDIA H200", baselines=load_baselines(), refs=[GpuRef(0)]
    )
    assert metrics["sizes"] == [] and metrics["algbw_gbps"] is None and metrics["busbw_gbps"] is None
    assert {f.code for f in findings} == {"allreduce.one-rank", "allreduce.ddp-one-rank"}


def test_ranks_that_disagree_after_a_ddp_step_fail() -> None:
    def rank(r: int, checksum: str) -> dict[str, Any]:
        return {"rank": r, "ddp": {"checksum": checksum, "finite": True}}

    assert judging.ddp_findings([rank(0, "1.5"), rank(1, "1.5")]) == []
    [found] = judging.ddp_findings([rank(0, "1.5"), rank(1, "1.25")])
    assert found.code == "allreduce.ddp-disagree" and "rank 1=1.25" in found.message


@pytest.mark.torch  # imports torch in this process
def test_one_device_repeats_the_seeded_step() -> None:
    import torch

    dev = torch.device("cpu")
    sums = {0: amp.step_checksum(dev), 1: amp.step_checksum(dev)}
    assert sums[0] == sums[1] and amp.checksum_findings(sums, ctx(1)) == []
    [found] = amp.checksum_findings({0: "a", 1: "a", 2: "b"}, ctx(3))
    assert found.code == "amp.checksum-mismatch" and found.gpu == GpuRef(2, "GPU-2", None)


def test_the_amp_tolerance_comes_from_the_dtype_not_the_label() -> None:
    fp32 = {"losses": [2.0, 0.5], "finite_grads": True, "scale": None, "skipped": 0}
    off = {"losses": [2.2, 0.5], "finite_grads": True, "scale": None, "skipped": 0}  # 10 % off
    assert [f.code for f in amp.judge_run("bf16 run", off, fp32, item="bf16", dtype="bfloat16")] == [
        "amp.far-from-fp32"
    ]
    assert amp.judge_run("float16 mislabelled", off, fp32, item="x", dtype=None) == []


@pytest.mark.parametrize(
    ("arch_list", "cc", "expected"),
    [
        (["sm_90", "sm_100", "compute_100"], "10.3", None),  # sm_100 cubins run on sm_103
        (["sm_90a", "compute_90a"], "9.0", None),  # arch-specific entries parse and run on their own GPU
        (["sm_90a", "compute_90a"], "10.0", "stack.arch-unsupported"),  # ... and nowhere else
        (["sm_80", "compute_80"], "9.0", "stack.ptx-jit"),
        (["sm_120"], "10.0", "stack.arch-unsupported"),
        (["sm_90", "weird_entry"], "9.0", None),
    ],
)
def test_arch_list_entries_and_compatibility(arch_list: list[str], cc: str, expected: str | None) -> None:
    facts = {"torch": "9.9.9", "torch_cuda": "12.8", "arch_list": arch_list, "cudnn": 90100, "driver": None}
    facts["gpus"] = [{"index": 0, "cuda_index": 0, "name": "GPU", "compute_capability": cc}]
    found = [f.code for f in stack_evaluate(facts, load_kb(), device="cuda")]
    arch = [c for c in found if c in ("stack.ptx-jit", "stack.arch-unsupported")]
    assert arch == ([expected] if expected else [])


def test_compatibility_rules() -> None:
    assert runs_natively("sm_100", 10, 3) and not runs_natively("sm_103", 10, 0)
    assert not runs_natively("sm_90", 10, 0) and not runs_natively("sm_100a", 10, 3)
    assert runs_as_ptx("compute_80", 12, 0) and not runs_as_ptx("compute_90a", 10, 0)


@pytest.mark.torch  # imports torch in this process
def test_full_fp32_uses_the_precision_setting_and_restores_it() -> None:
    import torch

    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    with common.full_fp32():
        assert matmul.fp32_precision == "ieee" and torch.backends.cudnn.conv.fp32_precision == "ieee"
    assert matmul.fp32_precision == before


def test_cupti_advice_does_not_cite_the_counter_switch() -> None:
    [found] = [f for f in profiler.evaluate(cpu_events=5, cuda_events=0, cuda=True) if f.severity == "fail"]
    assert found.code == "profiler.no-cuda-events" and found.remediation
    assert "NVreg_RestrictProfilingToAdminUsers" not in found.remediation
    assert "RestrictProfiling" not in str(catalogue.rules())
