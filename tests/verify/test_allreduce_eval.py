"""Bandwidth arithmetic and the judgement of rank results (pure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuenv.errors import BadRequest
from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.checks.allreduce.collectives import MiB
from gpuenv.verify.checks.allreduce.judging import bandwidth, evaluate
from gpuenv.verify.model import GpuRef

BASE = load_baselines()
GiB = 1024 * MiB


@pytest.mark.parametrize(
    ("coll", "world", "factor"),
    [("allreduce", 8, 2 * 7 / 8), ("allreduce", 2, 1.0), ("allgather", 8, 7 / 8), ("reducescatter", 4, 3 / 4)],
)
def test_busbw_uses_the_nccl_tests_factors(coll: str, world: int, factor: float) -> None:
    algbw, busbw = bandwidth(coll, 1_000_000_000, 0.5, world)
    assert algbw == pytest.approx(2.0) and busbw == pytest.approx(2.0 * factor)


def test_one_rank_has_no_busbw() -> None:
    assert bandwidth("allreduce", 1000, 1e-6, 1)[1] is None


def rank(
    r: int,
    seconds: float,
    *,
    size: int = GiB,
    errors: list[dict[str, Any]] | None = None,
    pairs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "rank": r,
        "device": f"cuda:{r}",
        "errors": errors or [],
        "skipped": {},
        "pairs": pairs or [],
        "times": {f"allreduce:{size}": [seconds, seconds]},
    }


def refs(n: int) -> list[GpuRef]:
    return [GpuRef(i, f"GPU-{i}", f"0000:{0x18 + 16 * i:02x}:00.0") for i in range(n)]


def judge(results: list[dict[str, Any]], gpu: str = "NVIDIA H100 80GB HBM3", device: str = "cuda") -> list[Any]:
    findings, _ = evaluate(
        results, world=len(results), device=device, gpu_name=gpu, baselines=BASE, refs=refs(len(results))
    )
    return findings


def seconds_for_busbw(busbw: float, world: int, size: int = GiB) -> float:
    return size * 2 * (world - 1) / world / (busbw * 1e9)


def test_bandwidth_against_the_h100_baseline() -> None:
    healthy = judge([rank(r, seconds_for_busbw(380, 8)) for r in range(8)])
    assert [f.severity for f in healthy if f.item == "bandwidth"] == []
    slow = judge([rank(r, seconds_for_busbw(320, 8)) for r in range(8)])  # 86% of 370
    assert [f.severity for f in slow if f.item == "bandwidth"] == ["warn"]
    broken = judge([rank(r, seconds_for_busbw(200, 8)) for r in range(8)])  # 54%
    assert [f.severity for f in broken if f.item == "bandwidth"] == ["fail"]


def test_the_slowest_rank_sets_the_time() -> None:
    results = [rank(r, seconds_for_busbw(380, 8)) for r in range(7)] + [rank(7, seconds_for_busbw(200, 8))]
    assert [f.severity for f in judge(results) if f.item == "bandwidth"] == ["fail"]


def test_no_baseline_means_correctness_only() -> None:
    for findings in (
        judge([rank(r, 0.5) for r in range(2)], device="cpu"),
        judge([rank(r, 0.5) for r in range(8)], gpu="NVIDIA Mystery GPU"),
        judge([rank(r, 0.001, size=MiB) for r in range(8)]),
    ):  # too small for the baseline
        assert [(f.severity, "no baseline" in f.message) for f in findings] == [("info", True)]


def test_a_wrong_element_fails_naming_the_rank_and_gpu() -> None:
    error = {
        "collective": "allreduce",
        "bytes": 64 * MiB,
        "iteration": 0,
        "wrong": 1,
        "elements": 16 * MiB,
        "index": 5592405,
        "off_by": 1.0,
    }
    findings = judge([rank(0, 0.1), rank(1, 0.1, errors=[error])])
    [bad] = [f for f in findings if f.severity == "fail"]
    assert "rank 1" in bad.message and "GPU-1" in bad.message and bad.gpu == refs(2)[1] and bad.action == "drain"


def test_pairwise_bisection_names_the_common_gpu() -> None:
    # pairs (i, i+1): GPU 2 is in the failing pairs 1-2 and 2-3
    pairs = {
        r: [
            {"pair": [p, (p + 1) % 4], "wrong": int(2 in (p, (p + 1) % 4)), "time": 0.01}
            for p in range(4)
            if r in (p, (p + 1) % 4)
        ]
        for r in range(4)
    }
    findings = judge([rank(r, 0.1, pairs=pairs[r]) for r in range(4)])
    [bisect] = [f for f in findings if f.item == "bisect"]
    assert "suspect GPU 2" in bisect.message and bisect.gpu == refs(4)[2]


def test_baselines_file_is_checked(tmp_path: Path) -> None:
    bad = tmp_path / "b.json"
    bad.write_text(
        json.dumps(
            {"schema": "gpuenv.baselines/1", "fail_below": 0.9, "warn_below": 0.5, "busbw": [], "matmul_tflops": []}
        )
    )
    with pytest.raises(BadRequest):
        load_baselines(bad)
    good = tmp_path / "g.json"
    good.write_text(
        json.dumps(
            {
                "schema": "gpuenv.baselines/1",
                "fail_below": 0.5,
                "warn_below": 0.8,
                "busbw": [
                    {"match": ["Mystery"], "gpus": 2, "collective": "allreduce", "min_bytes": 0, "busbw_gbps": 10}
                ],
                "matmul_tflops": [],
            }
        )
    )
    assert load_baselines(good).expected_busbw("NVIDIA Mystery GPU", 2, "allreduce", 1) == 10


def test_shipped_baselines_match_model_names() -> None:
    assert BASE.expected_busbw("NVIDIA H100 80GB HBM3", 8, "allreduce", GiB) == 370
    assert BASE.expected_busbw("NVIDIA H100 PCIe", 8, "allreduce", GiB) is None
    assert BASE.expected_tflops("NVIDIA A100-SXM4-80GB", "bf16") == 271
    assert BASE.expected_tflops("NVIDIA H200", "bf16") == 795
