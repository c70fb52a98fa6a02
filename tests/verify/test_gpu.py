"""On a machine with NVIDIA GPUs: the CUDA paths (NCCL collectives, CUDA profiler events, fp16
GradScaler on CUDA, cuDNN convolution, GPU memory) and what only a GPU can show of the NVML and
timing paths (links under load, the fabric, per-device timing). Skipped with a reason elsewhere.

This process never touches CUDA: every question to torch and every bit of torch work runs in a
child process, so no test holds a CUDA context (memory, an EXCLUSIVE_PROCESS slot) while the next
one runs gpuenv verify."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_gpuenv
from tests.verify.conftest import check


def in_child(code: str, timeout: float = 300) -> str:
    """The last line a fresh python prints running `code` (its CUDA context ends with it)."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@functools.cache
def cuda_gpus() -> int:
    code = "import torch; print(torch.cuda.device_count() if torch.version.cuda and torch.cuda.is_available() else 0)"
    try:
        return int(in_child(code))
    except (AssertionError, ValueError, IndexError, subprocess.TimeoutExpired):  # no torch: no GPU test
        return 0


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(cuda_gpus() == 0, reason="needs an NVIDIA GPU and a CUDA build of torch"),
]


@pytest.fixture(scope="module")
def standard(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One standard-level run on this node, shared by the tests that read it (or the report of one
    that scripts/gpu-run.sh just made, named by GPUENV_TEST_STANDARD_REPORT)."""
    given = os.environ.get("GPUENV_TEST_STANDARD_REPORT")
    if given:
        return dict(json.loads(Path(given).read_text()))
    report_path = tmp_path_factory.mktemp("gpu") / "verify.json"
    run_gpuenv("verify", "--level", "standard", "--device", "cuda", "--report", str(report_path), timeout=900)
    report: dict[str, Any] = json.loads(report_path.read_text())
    return report


def test_standard_level_certifies_this_gpu_node(standard: dict[str, Any]) -> None:
    assert standard["verdict"]["exit_code"] == 0, json.dumps(standard["checks"], indent=1)[-6000:]
    assert standard["device"] == "cuda" and not standard["cpu_only"]
    assert check(standard, "allreduce")["metrics"]["backend"] == "nccl"
    assert check(standard, "profiler")["metrics"]["cuda_events"] > 0
    assert not any("fp16" in s for s in check(standard, "amp")["detail"]["skipped"])
    assert len(standard["host"]["gpus"]) == cuda_gpus()
    codes = {f["code"] for c in standard["checks"] for f in c["findings"]}
    assert None not in codes


def test_links_are_read_under_load_and_gpuenv_is_not_a_leftover(standard: dict[str, Any]) -> None:
    nvml = check(standard, "nvml")
    visible = {g["index"] for g in standard["host"]["gpus"]}
    links = [g["pcie"] for g in nvml["detail"]["snapshot"]["gpus"] if g["index"] in visible]
    assert links and all(p["under_load"] for p in links if p["gen"] is not None)
    assert not [f for f in nvml["findings"] if f["code"] in ("nvml.pcie_downgraded", "nvml.leftover_processes")]
    assert not [f for f in nvml["findings"] if f["code"] == "nvml.pcie-not-judged"]


def test_the_fabric_is_read_without_crashing(standard: dict[str, Any]) -> None:
    for gpu in check(standard, "nvml")["detail"]["snapshot"]["gpus"]:
        fabric, why = gpu["fabric"], (gpu["unread"].get("fabric") or {}).get("code", "")
        assert (fabric is not None and set(fabric) == {"state", "status", "clique"}) or "bindings" not in why
    assert check(standard, "nvml")["metrics"]["compute_modes"]


def test_clocks_reasons_and_violation_counters_are_sampled_under_load(standard: dict[str, Any]) -> None:
    nvml = check(standard, "nvml")
    visible = {g["index"] for g in standard["host"]["gpus"]}
    for gpu in (g for g in nvml["detail"]["snapshot"]["gpus"] if g["index"] in visible):
        reading = gpu["under_load"]
        assert reading["samples"] == 20 and reading["reasons_read"] == 20  # standard: 20 x 0.25 s
        assert reading["sm_clock_median"] and gpu["sm_clock_max"]
        assert reading["sm_clock_median"] > gpu["sm_clock"] or gpu["sm_clock"] == gpu["sm_clock_max"]  # busy
        assert {"power", "thermal"} <= set(reading["violation_s"]) or "violation" in json.dumps(reading["unread"])
        assert not [f for f in gpu["unread"].values() if f["class"] != "absent"], gpu["unread"]  # every call answered
        assert gpu["power"]["enforced_mw"] and gpu["power"]["default_mw"]
    assert not [f for f in nvml["findings"] if f["code"] == "nvml.throttled_under_load"]


def test_the_passive_check_reads_a_gpu_node_without_load() -> None:
    proc = run_gpuenv("verify", "--check", "nvml", "--passive", "--json", timeout=120)
    report = json.loads(proc.stdout)
    nvml = check(report, "nvml")
    assert report["options"]["passive"] and nvml["status"] in ("pass", "warn"), nvml["summary"]
    gpus = nvml["detail"]["snapshot"]["gpus"]
    assert len(gpus) >= cuda_gpus() and not any("under_load" in g for g in gpus)
    assert all(g["power"]["enforced_mw"] for g in gpus)


def test_matmul_figures_by_shape_and_collectives_by_size(standard: dict[str, Any]) -> None:
    amp = check(standard, "amp")["metrics"]
    assert set(amp["matmul_tflops_by_shape"]) == {"4096x4096x4096", "8192x8192x8192"}
    assert amp["matmul_shape"] == "8192x8192x8192" and len(amp["copy_gbps"]) == cuda_gpus()
    assert all(50 < v < 20_000 for v in amp["copy_gbps"].values())  # GB/s: HBM/GDDR, not a cache
    for per_gpu in amp["matmul_tflops_by_shape"].values():
        assert len(per_gpu) == cuda_gpus()
        assert all(1 < v < 5000 for v in per_gpu.values())  # launches alone would give absurd figures
    sizes = check(standard, "allreduce")["metrics"]["sizes"]
    if cuda_gpus() >= 2:
        assert {r["collective"] for r in sizes} == {"allreduce", "allgather", "reducescatter"}
        assert all(r["busbw_gbps"] and r["busbw_gbps"] > 0 for r in sizes)


def test_the_report_times_every_phase(standard: dict[str, Any]) -> None:
    timings = standard["timings"]
    assert {"probe", "worker_start", "total"} <= set(timings)
    assert {f"check:{c['name']}" for c in standard["checks"]} <= set(timings)


@pytest.mark.skipif(cuda_gpus() < 2, reason="needs two GPUs to see which one a sync waits for")
def test_sync_waits_for_the_device_measured() -> None:
    code = """
        import torch
        from gpuenv.verify.workloads import common

        torch.cuda.set_device(0)
        dev = torch.device("cuda", 1)
        a = torch.randn(8192, 8192, device=dev)
        for _ in range(20):
            a = a @ a / 8192
        common.sync(dev)
        print(torch.cuda.current_stream(dev).query())
    """
    assert in_child(code) == "True"  # GPU 1's queue is empty, though GPU 0 is current


def test_one_gpu_checks_itself_without_a_bandwidth(tmp_path: Path) -> None:
    report_path = tmp_path / "one.json"
    env = {"CUDA_VISIBLE_DEVICES": "0"}
    run_gpuenv(
        "verify",
        "--device",
        "cuda",
        "--check",
        "allreduce",
        "--check",
        "amp",
        "--report",
        str(report_path),
        env=env,
        timeout=600,
    )
    report = json.loads(report_path.read_text())
    allreduce = check(report, "allreduce")
    assert allreduce["status"] == "pass" and "bandwidth not measured" in allreduce["summary"]
    assert allreduce["metrics"]["sizes"] == [] and allreduce["metrics"]["algbw_gbps"] is None
    assert check(report, "amp")["status"] == "pass"


def test_exclusive_process_mode_does_not_break_the_ranks(tmp_path: Path) -> None:
    """Only where the node is already in EXCLUSIVE_PROCESS mode (changing it needs root and is
    the operator's call): the load process, the ranks and the worker take turns."""
    import pynvml

    pynvml.nvmlInit()
    try:
        modes = {pynvml.nvmlDeviceGetComputeMode(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(cuda_gpus())}
    finally:
        pynvml.nvmlShutdown()
    if modes != {pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS}:
        pytest.skip(f"compute modes here: {sorted(modes)}; set EXCLUSIVE_PROCESS (nvidia-smi -c 3) to run it")
    proc = run_gpuenv("verify", "--device", "cuda", "--json", timeout=600, env=dict(os.environ))
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, json.dumps(report["checks"], indent=1)[-4000:]
    assert check(report, "nvml")["metrics"]["compute_modes"] == ["EXCLUSIVE_PROCESS"]


NEW_CHECKS = ("models", "parallel", "fp8", "onnx", "memory", "profiler", "compile")


@pytest.fixture(scope="module")
def deep_workloads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One deep run of the workload checks on this node (the whole deep budget of each)."""
    folder = tmp_path_factory.mktemp("deep")
    checks = [arg for name in NEW_CHECKS for arg in ("--check", name)]
    run_gpuenv(
        "verify",
        "--level",
        "deep",
        "--device",
        "cuda",
        *checks,
        "--report",
        str(folder / "verify.json"),
        "--artifacts",
        str(folder / "artifacts"),
        timeout=2400,
    )
    report: dict[str, Any] = json.loads((folder / "verify.json").read_text())
    return report


def compute_capability() -> tuple[int, int]:
    major, minor = in_child("import torch; print(*torch.cuda.get_device_capability(0))").split()
    return int(major), int(minor)


def test_models_train_on_every_gpu_with_figures_and_energy(deep_workloads: dict[str, Any]) -> None:
    models = check(deep_workloads, "models")
    assert models["status"] in ("pass", "warn"), json.dumps(models, indent=1)[-4000:]
    metrics, gpus = models["metrics"], {str(i) for i in range(cuda_gpus())}
    for key in ("cv_images_per_s", "cv_compute_images_per_s", "nlp_tokens_per_s"):
        assert set(metrics[key]) == gpus and all(v > 0 for v in metrics[key].values())
    assert 0 < metrics["rec_p50_ms"] <= metrics["rec_p99_ms"] and metrics["rec_queries_per_s"] > 0
    assert ("cv_scaling_efficiency" in metrics) == (cuda_gpus() > 1)
    if "cv_step_j" in metrics:  # NVML's counter or power samples
        assert set(metrics["nlp_tokens_per_j"]) == gpus and models["detail"]["energy_source"]
        assert set(metrics["rec_batch_j"]) == gpus and metrics["rec_queries_per_j"] > 0
    else:
        assert "neither" in " ".join(models["detail"]["energy_source"])
    assert models["detail"]["accumulation_gap"] < 1e-3 and models["detail"]["sampler"]["disjoint"]


def test_parallel_matches_one_gpu(deep_workloads: dict[str, Any]) -> None:
    parallel = check(deep_workloads, "parallel")
    if cuda_gpus() < 2:
        assert parallel["status"] == "skip" and "2 GPUs" in parallel["summary"]
        return
    assert parallel["status"] == "pass", parallel["summary"]
    assert set(parallel["metrics"]["gaps"]) == {"dataparallel", "tensor", "pipeline"}


def test_fp8_runs_where_the_gpu_has_it(deep_workloads: dict[str, Any]) -> None:
    fp8 = check(deep_workloads, "fp8")
    if compute_capability() < (8, 9):
        assert fp8["status"] == "skip" and "sm_89" in fp8["summary"]
        return
    assert fp8["status"] in ("pass", "warn"), fp8["summary"]
    assert all(v > 50 for v in fp8["metrics"]["fp8_tflops"].values())  # launches alone would be absurd
    assert all(g < 0.1 for g in fp8["metrics"]["gaps"].values())


def test_memory_headroom_on_the_gpu(deep_workloads: dict[str, Any]) -> None:
    memory = check(deep_workloads, "memory")
    assert memory["status"] == "pass", memory["summary"]
    metrics = memory["metrics"]
    assert metrics["nlp_max_batch"] >= 8 and metrics["oom_recovered"]
    assert metrics["checkpoint_saving_gib"] > 0 and set(metrics["free_gib"]) == {str(i) for i in range(cuda_gpus())}


def test_onnx_runtime_matches_on_the_gpu_node(deep_workloads: dict[str, Any]) -> None:
    onnx = check(deep_workloads, "onnx")
    if onnx["status"] == "skip":
        pytest.skip(onnx["summary"])
    provider = onnx["metrics"]["provider"]
    assert onnx["status"] == ("pass" if provider == "CUDAExecutionProvider" else "warn"), onnx["summary"]
    assert onnx["metrics"]["onnx_latency_ms"] > 0


def test_profiler_timeline_and_compile_speedup(deep_workloads: dict[str, Any]) -> None:
    profiler, compiled = check(deep_workloads, "profiler"), check(deep_workloads, "compile")
    assert profiler["status"] == "pass" and profiler["metrics"]["memory_timeline_points"] > 0
    assert any(a.endswith("profiler-memory-timeline.json") for a in profiler["artifacts"])
    if "nsys" in profiler["metrics"]:
        assert profiler["metrics"]["nsys"]["ok"]
    assert compiled["status"] in ("pass", "warn") and compiled["metrics"]["compile_speedup"] > 0
