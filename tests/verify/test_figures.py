"""The figure registry and the baselines' figures table (what fleet, baselines and cost read)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuenv.errors import BadRequest
from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.figures import BY_NAME, readings


def test_readings_take_per_gpu_figures_and_skip_malformed_values() -> None:
    checks = [
        {"name": "amp", "metrics": {"matmul_tflops": {"0": 10.5, "1": "fast", "x": 3, "2": float("nan"), "3": 9}}},
        {"name": "allreduce", "metrics": {"matmul_tflops": {"0": 1.0}}},  # another check's key: not this figure
    ]
    got = [(r.figure.name, r.gpu_index, r.value) for r in readings(checks)]
    assert got == [("amp.matmul_tflops", 0, 10.5), ("amp.matmul_tflops", 3, 9.0)]


def test_lower_is_better_figures_judge_the_other_way(tmp_path: Path) -> None:
    baselines = load_baselines()
    assert BY_NAME["amp.energy_per_step_j"].worse(2.0, than=1.0)
    assert baselines.judge(2.0, 1.0, better="lower") == "fail"
    assert baselines.judge(1.0, 1.0, better="lower") == "pass"
    assert baselines.judge(0.5, 1.0) == "fail"


def write(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    return path


def test_figures_rows_match_model_and_optional_gpu_count(tmp_path: Path) -> None:
    rows = [
        {"match": ["H100"], "gpus": 8, "figure": "amp.matmul_tflops", "value": 700, "samples": 12},
        {"match": ["H100"], "figure": "amp.matmul_tflops", "value": 650},
    ]
    base = {"fail_below": 0.75, "warn_below": 0.9, "busbw": [], "matmul_tflops": []}
    path = write(tmp_path, {"schema": "gpuenv.baselines/2", **base, "figures": rows})
    baselines = load_baselines(path)
    assert baselines.expected_figure("amp.matmul_tflops", "NVIDIA H100 80GB HBM3", gpus=8) == 700
    assert baselines.expected_figure("amp.matmul_tflops", "NVIDIA H100 80GB HBM3", gpus=4) == 650
    assert baselines.expected_figure("amp.matmul_tflops", "NVIDIA A100-SXM4-80GB") is None
    old = load_baselines(write(tmp_path, {"schema": "gpuenv.baselines/1", **base}))  # /1 still loads
    assert old.figures == ()


def test_a_figures_row_without_a_value_is_a_bad_request(tmp_path: Path) -> None:
    base = {"fail_below": 0.75, "warn_below": 0.9, "busbw": [], "matmul_tflops": []}
    path = write(tmp_path, {"schema": "gpuenv.baselines/2", **base, "figures": [{"match": ["L4"], "figure": "amp.x"}]})
    with pytest.raises(BadRequest, match="value"):
        load_baselines(path)
