"""`gpuenv matrix --gpu` (only the builds that run on that GPU) and `matrix --drivers` (each driver
branch, its max CUDA, the torch builds it runs), through the real CLI."""

from __future__ import annotations

import json

from tests.conftest import run_gpuenv


def test_matrix_gpu_keeps_only_builds_with_code_for_that_gpu() -> None:
    every = json.loads(run_gpuenv("matrix", "--json").stdout)["torch"]
    blackwell = json.loads(run_gpuenv("matrix", "--gpu", "sm_120", "--json").stdout)["torch"]
    assert len(blackwell) < len(every)
    assert all("cu118" not in t["builds"] and t["builds"] for t in blackwell)  # cu118 has no sm_120 code
    assert {t["default_build"] for t in blackwell} <= {b for t in blackwell for b in t["builds"]}
    h100 = run_gpuenv("matrix", "--gpu", "H100")
    # 1.13's builds predate sm_90
    assert h100.returncode == 0 and "1.13.1" not in h100.stdout and "2.4.1" in h100.stdout


def test_matrix_gpu_unknown_is_a_bad_request_naming_the_known() -> None:
    proc = run_gpuenv("matrix", "--gpu", "H900")
    assert proc.returncode == 2 and "unknown GPU 'H900'" in proc.stderr and "H100" in proc.stderr


def test_matrix_drivers_gives_each_branch_its_max_cuda_and_torch_builds() -> None:
    proc = run_gpuenv("matrix", "--drivers", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["branch"]: row for row in json.loads(proc.stdout)["drivers"]}
    assert rows["R535"]["max CUDA"] == "12.2" and rows["R535"]["with minor-version compat"] == "12.9"
    assert rows["R550"]["max CUDA"] == "12.4" and "cu124 2.4.0–2.6.0" in rows["R550"]["torch builds it runs"]
    assert "cu126" not in rows["R550"]["torch builds it runs"]
    text = run_gpuenv("matrix", "--drivers").stdout
    assert "NVIDIA driver branches" in text and "R580" in text
