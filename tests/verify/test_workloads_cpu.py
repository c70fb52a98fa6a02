"""The deep workload checks on the CPU, through the real CLI: models, parallel (its CPU parts),
onnx, the extended profiler and compile run with figures; fp8 and memory skip, saying why."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from tests.verify.conftest import check, verify_json

pytestmark = [pytest.mark.cpu, pytest.mark.slow]
CHECKS = ("models", "parallel", "fp8", "onnx", "memory", "profiler", "compile")


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    artifacts = tmp_path_factory.mktemp("artifacts")
    args = [arg for name in CHECKS for arg in ("--check", name)]
    code, report, _ = verify_json(
        "--device", "cpu", "--level", "deep", *args, "--artifacts", str(artifacts), timeout=900
    )
    return code, report, artifacts


def test_the_deep_workloads_certify_the_cpu(deep: tuple[int, dict[str, Any], Path]) -> None:
    code, report, _ = deep
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert code == 0, json.dumps(report["checks"], indent=1)[-4000:]
    assert statuses["fp8"] == "skip" and "sm_89" in check(report, "fp8")["summary"]
    assert statuses["memory"] == "skip"
    assert all(statuses[name] == "pass" for name in ("models", "parallel", "profiler", "compile"))


def test_models_report_every_figure_but_energy(deep: tuple[int, dict[str, Any], Path]) -> None:
    models = check(deep[1], "models")
    metrics = models["metrics"]
    for key in ("cv_images_per_s", "nlp_tokens_per_s"):
        assert set(metrics[key]) == {"0", "1"} and all(v > 0 for v in metrics[key].values())
    assert metrics["cv_images_per_s_total"] > 0 and metrics["cv_scaling_efficiency"] > 0
    assert 0 < metrics["rec_p50_ms"] <= metrics["rec_p99_ms"] and metrics["rec_queries_per_s"] > 0
    assert not {
        "cv_step_j",
        "nlp_step_j",
        "rec_batch_j",
        "cv_images_per_j",
        "nlp_tokens_per_j",
        "rec_queries_per_j",
    } & set(metrics)
    assert "CPU" in models["detail"]["energy"]
    assert models["detail"]["accumulation_gap"] < 1e-3 and models["detail"]["sampler"]["disjoint"]


def test_parallel_runs_the_split_arithmetic_and_says_what_it_left(deep: tuple[int, dict[str, Any], Path]) -> None:
    parallel = check(deep[1], "parallel")
    assert set(parallel["metrics"]["gaps"]) == {"tensor", "pipeline"}
    assert any("DataParallel" in s for s in parallel["detail"]["skipped"])


def test_profiler_writes_a_memory_timeline_and_compile_reports_its_speedup(
    deep: tuple[int, dict[str, Any], Path],
) -> None:
    _, report, artifacts = deep
    profiler = check(report, "profiler")
    assert profiler["metrics"]["memory_timeline_points"] > 0
    assert (artifacts / "profiler-memory-timeline.json").is_file()
    assert any(f["code"] == "profiler.nsys-not-checked" for f in profiler["findings"])
    assert check(report, "compile")["metrics"]["compile_speedup"] > 0


def test_onnx_runtime_matches_pytorch(deep: tuple[int, dict[str, Any], Path]) -> None:
    require(importlib.util.find_spec("onnxruntime") is not None, "needs the onnx extra: pip install -e '.[onnx]'")
    onnx = check(deep[1], "onnx")
    assert onnx["status"] == "pass", onnx["summary"]
    assert onnx["metrics"]["provider"] == "CPUExecutionProvider" and onnx["metrics"]["onnx_latency_ms"] > 0
