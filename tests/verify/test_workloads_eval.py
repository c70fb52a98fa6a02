"""The pure halves of the deep workload checks (models, parallel, fp8, onnx, memory headroom, the
profiler's deep part, compile's speedup): each judgement made to pass and to fail, no torch."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from typing import Any

import pytest

from gpuenv.verify import registry
from gpuenv.verify.baselines import Baselines
from gpuenv.verify.checks import compile, fp8, memory, models, onnx, parallel, profiler
from gpuenv.verify.context import CheckContext
from gpuenv.verify.figures import BY_NAME, readings
from gpuenv.verify.model import GpuRef
from gpuenv.verify.workloads import common

REFS = [GpuRef(i, f"GPU-{i}") for i in range(8)]


def rank_result(rank: int, **over: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "cv_images_per_s": 1000.0,
        "cv_compute_images_per_s": 1200.0,
        "nlp_tokens_per_s": 50_000.0,
        "cv_step_j": 30.0,
        "nlp_step_j": 40.0,
        "cv_images_per_j": 2.0,
        "nlp_tokens_per_j": 100.0,
        "rec_batch_j": 4.0,
        "energy_source": "NVML total-energy counter",
        "losses_finite": True,
        "rec_checksum": "1.0e+00",
        "rec_ms": [2.0] * 98 + [5.0, 9.0],
        "rec_queries": 2048 * 100,
        "cv_shape": {},
        "nlp_shape": {"accumulate": 2},
        "rec_shape": {"batch": 2048},
        "accumulation_gap": 1e-6 if rank == 0 else None,
        "sampler": {"pool": 8, "sampled": 8, "disjoint": True},
    }
    if rank == 0:
        result["cv_solo_images_per_s"] = 1100.0
    return {**result, **over}


def judged(results: list[dict[str, Any]], *, cuda: bool = True) -> tuple[dict[str, Any], list[str | None]]:
    metrics, detail = models.collect(results, world=len(results))
    found = models.evaluate(metrics, detail, cuda=cuda, world=len(results), refs=REFS)
    return metrics, [f.code for f in found]


def test_models_figures_per_gpu_and_per_node() -> None:
    metrics, codes = judged([rank_result(0), rank_result(1)])
    assert codes == []
    assert metrics["cv_images_per_s"] == {"0": 1000.0, "1": 1000.0}
    assert metrics["cv_images_per_s_total"] == 2000.0
    assert metrics["cv_scaling_efficiency"] == pytest.approx(2000 / (2 * 1100), abs=1e-3)
    assert (metrics["rec_p50_ms"], metrics["rec_p99_ms"]) == (2.0, 5.0)
    assert metrics["rec_queries_per_s"] == pytest.approx(2048 * 100 / (sum(rank_result(0)["rec_ms"]) / 1000), rel=1e-3)
    assert metrics["rec_batch_j"] == {"0": 4.0, "1": 4.0}
    assert metrics["rec_queries_per_j"] == 2048 / 8.0  # a batch's queries over both GPUs' joules
    assert {r.figure.name for r in readings([{"name": "models", "metrics": metrics}])} >= {
        "models.rec_queries_per_j",
        "models.cv_images_per_s",
        "models.nlp_tokens_per_j",
        "models.rec_p99_ms",
        "models.cv_scaling_efficiency",
    }


def test_the_recommenders_queries_per_joule_needs_every_gpus_energy() -> None:
    metrics, _ = judged([rank_result(0), rank_result(1, rec_batch_j=None)])
    assert "rec_queries_per_j" not in metrics and metrics["rec_batch_j"] == {"0": 4.0}


def test_one_gpu_has_no_scaling_efficiency() -> None:
    metrics, _ = judged([rank_result(0)])
    assert "cv_scaling_efficiency" not in metrics


@pytest.mark.parametrize(
    ("over", "code"),
    [
        ({"accumulation_gap": 0.05}, "models.accumulation-mismatch"),
        ({"accumulation_gap": float("nan")}, "models.accumulation-mismatch"),
        ({"sampler": {"pool": 8, "sampled": 8, "disjoint": False}}, "models.sampler-overlap"),
        ({"losses_finite": False}, "models.non-finite"),
        ({"rec_ms": [2.0] * 90 + [30.0] * 10}, "models.rec-latency-high"),
    ],
)
def test_models_failures_are_found(over: dict[str, Any], code: str) -> None:
    _, codes = judged([rank_result(0, **over), rank_result(1)])
    assert code in codes


def test_shards_that_disagree_and_slow_gpus_are_named() -> None:
    _, codes = judged([rank_result(0), rank_result(1, rec_checksum="2.0e+00")])
    assert codes == ["models.rec-shards-disagree"]
    _, codes = judged([rank_result(0), rank_result(1), rank_result(2, nlp_tokens_per_s=10_000.0)])
    assert codes == ["models.gpu-outlier"]


def test_the_cpu_does_not_judge_latency_or_outliers() -> None:
    _, codes = judged([rank_result(0, rec_ms=[50.0] * 10), rank_result(1, cv_images_per_s=1.0)], cuda=False)
    assert codes == []
    _, codes = judged([rank_result(r, cv_compute_images_per_s=1.0 if r == 3 else 1200.0) for r in range(8)], cuda=False)
    assert codes == []


def test_one_gpu_of_eight_at_60_percent_of_the_others_compute_is_named() -> None:
    # Under DDP every rank's images/s is the same (the allreduce waits for the slowest): the judged
    # figure is each rank's own compute, measured in no_sync steps.
    results = [rank_result(r, cv_compute_images_per_s=720.0 if r == 6 else 1200.0) for r in range(8)]
    metrics, _ = models.collect(results, world=8)
    found = models.evaluate(metrics, {**models.collect(results, world=8)[1]}, cuda=True, world=8, refs=REFS)
    [outlier] = [f for f in found if f.code == "models.gpu-outlier"]
    assert outlier.gpu == REFS[6] and "GPU-6" in outlier.message and "cv_compute_images_per_s" in outlier.message
    assert metrics["cv_images_per_s"]["6"] == metrics["cv_images_per_s"]["0"]  # the DDP figure cannot tell


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert models.percentile(values, 50) == 50.0 and models.percentile(values, 99) == 99.0
    assert models.percentile([7.0], 99) == 7.0


BASE = Baselines(
    0.7,
    0.9,
    (),
    (),
    "test",
    (
        {"match": ["H100"], "figure": "models.cv_images_per_s", "value": 3000.0},
        {"match": ["H100"], "figure": "models.rec_p99_ms", "value": 2.0},
        {"match": ["H100"], "figure": "fp8.fp8_tflops", "value": 1000.0},
    ),
)


def test_figures_are_judged_against_the_baseline_in_their_direction() -> None:
    metrics = {"cv_images_per_s": {"0": 3100.0, "1": 2500.0, "2": 1000.0}, "rec_p99_ms": 4.0}
    verdicts = common.verdicts("models", metrics, BASE, "NVIDIA H100 80GB HBM3", 3)
    by = {(v.figure, v.gpu_index): v.verdict for v in verdicts}
    assert by[("models.cv_images_per_s", 0)] == "pass"
    assert by[("models.cv_images_per_s", 1)] == "warn"
    assert by[("models.cv_images_per_s", 2)] == "fail"
    assert by[("models.rec_p99_ms", None)] == "fail"  # lower is better: twice the expected latency
    ctx = CheckContext(level="deep", device="cuda")
    codes = [f.code for f in models.baseline_findings(verdicts, ctx)]
    assert codes == ["models.figure-under-expected", "models.figure-low", "models.figure-low"]


def test_figures_without_a_baseline_say_so() -> None:
    verdicts = common.verdicts("models", {"nlp_tokens_per_s": {"0": 1.0}}, BASE, "NVIDIA L4", 1)
    [found] = models.baseline_findings(verdicts, CheckContext(level="deep", device="cuda"))
    assert found.code == "models.no-baseline" and "models.nlp_tokens_per_s" in found.message


def test_every_new_figure_is_registered_with_its_direction() -> None:
    expected = {
        "models.cv_images_per_s": ("higher", True),
        "models.cv_images_per_s_total": ("higher", False),
        "models.cv_scaling_efficiency": ("higher", False),
        "models.nlp_tokens_per_s": ("higher", True),
        "models.rec_queries_per_s": ("higher", False),
        "models.rec_p50_ms": ("lower", False),
        "models.rec_p99_ms": ("lower", False),
        "models.cv_step_j": ("lower", True),
        "models.nlp_step_j": ("lower", True),
        "models.cv_images_per_j": ("higher", True),
        "models.nlp_tokens_per_j": ("higher", True),
        "models.rec_batch_j": ("lower", True),
        "models.rec_queries_per_j": ("higher", False),
        "fp8.fp8_tflops": ("higher", True),
        "compile.compile_speedup": ("higher", False),
        "onnx.onnx_latency_ms": ("lower", False),
    }
    assert {n: (BY_NAME[n].better, BY_NAME[n].per_gpu) for n in expected} == expected


def test_parallel_gaps_over_tolerance_fail_by_part() -> None:
    assert parallel.evaluate({"dataparallel": 1e-7, "tensor": 0.0, "pipeline": 5e-5}) == []
    codes = [f.code for f in parallel.evaluate({"dataparallel": 1e-2, "tensor": 1.0, "pipeline": float("nan")})]
    assert codes == ["parallel.dataparallel-mismatch", "parallel.tensor-mismatch", "parallel.pipeline-mismatch"]


def test_fp8_needs_sm89_and_must_match_bf16() -> None:
    assert fp8.has_fp8((8, 9)) and fp8.has_fp8((9, 0)) and fp8.has_fp8((10, 0))
    assert not fp8.has_fp8((8, 6)) and not fp8.has_fp8((8, 0))
    assert fp8.evaluate({0: 0.03}, {}, REFS) == []
    codes = [f.code for f in fp8.evaluate({0: 0.5}, {1: "CUBLAS_STATUS_NOT_SUPPORTED"}, REFS)]
    assert codes == ["fp8.unsupported", "fp8.mismatch"]


def test_fp8_tflops_against_the_baseline() -> None:
    ctx = CheckContext(level="deep", device="cuda")
    verdicts = common.verdicts("fp8", {"fp8_tflops": {"0": 500.0, "1": 990.0}}, BASE, "NVIDIA H100 80GB HBM3", 2)
    assert [f.code for f in fp8.judged(verdicts, ctx)] == ["fp8.figure-low"]
    verdicts = common.verdicts("fp8", {"fp8_tflops": {"0": 500.0}}, BASE, "NVIDIA L40S", 1)
    assert [f.code for f in fp8.judged(verdicts, ctx)] == ["fp8.no-baseline"]
    # a mixed node: each GPU's figure against its own model's baseline, the node's name for none
    models = {0: "NVIDIA L40S", 1: "NVIDIA H100 80GB HBM3"}
    mixed = common.verdicts("fp8", {"fp8_tflops": {"0": 500.0, "1": 990.0}}, BASE, "mixed", 2, models=models)
    assert [(v.gpu_index, v.gpu_name, v.verdict) for v in mixed] == [
        (0, "NVIDIA L40S", "none"),
        (1, "NVIDIA H100 80GB HBM3", "pass"),
    ]


def test_onnx_outputs_within_tolerance_and_the_gpu_provider() -> None:
    assert onnx.evaluate(max_abs=1e-6, max_ref=3.0, provider="CPUExecutionProvider", cuda=False) == []
    assert onnx.evaluate(max_abs=1e-6, max_ref=3.0, provider="CUDAExecutionProvider", cuda=True) == []
    mismatch = onnx.evaluate(max_abs=0.5, max_ref=3.0, provider="CPUExecutionProvider", cuda=False)
    assert [f.code for f in mismatch] == ["onnx.mismatch"]
    on_gpu_node = onnx.evaluate(max_abs=0.0, max_ref=1.0, provider="CPUExecutionProvider", cuda=True)
    assert [f.code for f in on_gpu_node] == ["onnx.cpu-provider"]


@pytest.mark.parametrize(("limit", "best"), [(0, 0), (1, 1), (7, 7), (8, 8), (100, 100), (8192, 8192), (10**6, 8192)])
def test_the_batch_search_finds_the_largest_that_fits(limit: int, best: int) -> None:
    calls: list[int] = []

    def fits(batch: int) -> bool:
        calls.append(batch)
        return batch <= limit

    found, tries = memory.largest_fitting(fits, start=8, cap=8192, tries=40)
    assert found == best and tries == len(calls) and all(b <= 8192 for b in calls)


def test_the_batch_search_is_bounded_and_never_overstates() -> None:
    found, tries = memory.largest_fitting(lambda b: b <= 1000, start=8, cap=8192, tries=10)
    assert tries == 10 and 512 <= found <= 1000


def headroom(**over: Any) -> dict[str, Any]:
    base = {
        "nlp_max_batch": 512,
        "oom_recovered": True,
        "oom_detail": "ok",
        "checkpoint_saving_gib": 3.0,
        "checkpoint_peak_gib": 2.0,
        "plain_peak_gib": 5.0,
    }
    return {**base, **over}


def test_memory_headroom_findings() -> None:
    assert memory.evaluate_headroom(headroom()) == []
    assert [f.code for f in memory.evaluate_headroom(headroom(nlp_max_batch=0))] == ["memory.nothing-fits"]
    assert [f.code for f in memory.evaluate_headroom(headroom(oom_recovered=False))] == ["memory.oom-not-recovered"]
    for saving in (-0.1, float("nan")):
        found = memory.evaluate_headroom(headroom(checkpoint_saving_gib=saving))
        assert [f.code for f in found] == ["memory.checkpoint-saves-nothing"]


def test_profiler_deep_part() -> None:
    assert profiler.evaluate_deep(timeline_points=40, timeline_error="", nsys=None) == []
    assert profiler.evaluate_deep(timeline_points=40, timeline_error="", nsys={"ok": True, "error": ""}) == []
    failed = profiler.evaluate_deep(timeline_points=0, timeline_error="boom", nsys={"ok": False, "error": "exit 1"})
    assert [f.code for f in failed] == ["profiler.memory-timeline-failed", "profiler.nsys-failed"]


def test_compile_speedup_is_judged_on_gpus_only() -> None:
    assert compile.evaluate_speedup(1.3, cuda=True) == []
    assert compile.evaluate_speedup(0.3, cuda=False) == []
    assert [f.code for f in compile.evaluate_speedup(0.5, cuda=True)] == ["compile.slower-than-eager"]
    assert [f.code for f in compile.evaluate_speedup(float("nan"), cuda=True)] == ["compile.slower-than-eager"]


def test_new_checks_run_at_deep_and_standard_is_unchanged() -> None:
    deep = [c.name for c in registry.select("deep", ())]
    standard = [c.name for c in registry.select("standard", ())]
    assert {"models", "parallel", "fp8", "onnx"} <= set(deep)
    assert set(standard) == {"nvml", "allreduce", "stack", "amp", "profiler", "compile", "conv"}
    assert deep.index("models") < deep.index("amp")  # its ranks need the GPUs before the worker holds them
    assert [
        registry.CHECKS[[c.name for c in registry.CHECKS].index(n)].timeout("standard") for n in ("profiler", "compile")
    ] == [90, 300]


def test_the_workloads_import_without_torch() -> None:
    code = (
        "import sys; from gpuenv.verify.workloads import cv, nlp, rec; "
        "s = nlp.size_for('cuda', 'deep'); assert (s.layers, s.hidden, s.heads) == (12, 768, 12); "
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_onnx_skips_naming_the_extra_when_a_package_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else real(name, *a))
    result = onnx.run(CheckContext(level="deep", device="cpu"))
    assert result.status == "skip" and "onnxscript" in result.summary and "gpuenv[onnx]" in result.summary


def test_fp8_skips_on_the_cpu_saying_why() -> None:
    result = fp8.run(CheckContext(level="deep", device="cpu"))
    assert result.status == "skip" and "sm_89" in result.summary


def test_latency_and_speedup_without_a_baseline_are_recorded_not_judged() -> None:
    onnx_verdicts = common.verdicts("onnx", {"onnx_latency_ms": 1.5}, BASE, "cpu", 1)
    assert [f.severity for f in onnx.judged(onnx_verdicts, cuda=False)] == ["info"]
    with_row = Baselines(
        0.7, 0.9, (), (), "t", ({"match": ["H100"], "figure": "compile.compile_speedup", "value": 1.5},)
    )
    slow = common.verdicts("compile", {"compile_speedup": 0.9}, with_row, "NVIDIA H100", 1)
    assert [f.code for f in compile.judged(slow, cuda=True)] == ["compile.slower-than-eager"]
    assert "0.9 x vs 1.5 expected on NVIDIA H100" in slow[0].text()
