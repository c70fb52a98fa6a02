"""The amp check's speed figures, per GPU: dense matmul TFLOP/s by shape and device-to-device copy
bandwidth, timed with CUDA events after a warm-up from idle clocks; judged (pure) against the GPU
model's expected figures (expectations.py), the recorded-run baseline (baselines.py, the tighter
second line) and the node's other GPUs (outliers.py). On the CPU they are measured and reported,
never judged: a shared host's speed says nothing about its health."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from gpuenv.verify.baselines import Baselines, load_baselines
from gpuenv.verify.catalogue import finding
from gpuenv.verify.context import CheckContext
from gpuenv.verify.expectations import Expectations, Expected, load_expectations
from gpuenv.verify.model import Finding
from gpuenv.verify.outliers import beyond_spread
from gpuenv.verify.workloads import common

# Quick measures the one shape the model expectations are for; standard and deep add a smaller one.
SHAPES = {"quick": [(8192, 8192, 8192)], "standard": [(4096, 4096, 4096), (8192, 8192, 8192)]}
SHAPES["deep"] = SHAPES["standard"]
CPU_SHAPE = (1024, 1024, 1024)
WARMUP_S = 0.3  # clocks ramp up from idle: time nothing before this much work
SAMPLE_S = 0.1  # each timed sample covers at least this much GPU work
SAMPLES = 3  # the median of these is the figure
COPY_BYTES = {"cuda": 1 << 30, "cpu": 64 << 20}  # copied device to device; far larger than any cache


def shape_key(shape: tuple[int, int, int]) -> str:
    return "x".join(str(n) for n in shape)


def matmul_dtype(dev: Any, cuda: bool) -> str:
    """bf16 where the GPU has bf16 tensor cores (sm_80 on), fp16 before (V100); fp32 on the CPU."""
    if not cuda:
        return "fp32"
    major, _minor = common.torch_module().cuda.get_device_capability(dev)
    return "bf16" if major >= 8 else "fp16"


TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def matmul_tflops(dev: Any, cuda: bool, shape: tuple[int, int, int], dtype: str = "") -> tuple[float, int]:
    """TFLOP/s of (m,k) @ (k,n) on one device: the median of SAMPLES timed runs, each of at
    least SAMPLE_S of work, after WARMUP_S of warm-up; CUDA events time the GPU itself.
    Returns (TFLOP/s, the number of matmuls run, warm-up included)."""
    torch = common.torch_module()

    m, k, n = shape
    kind = getattr(torch, TORCH_DTYPES[dtype or matmul_dtype(dev, cuda)])
    a = torch.randn(m, k, device=dev, dtype=kind)
    b = torch.randn(k, n, device=dev, dtype=kind)
    seconds, done, iters = _sampled(dev, cuda, lambda: a @ b)
    return 2 * m * k * n * iters / seconds / 1e12, done


def copy_gbps(dev: Any, cuda: bool) -> float:
    """Device memory bandwidth: a large tensor copied device to device (bytes read plus bytes
    written per second, as DCGM and nvbandwidth count a copy), median of SAMPLES timed runs."""
    torch = common.torch_module()

    nbytes = COPY_BYTES["cuda" if cuda else "cpu"]
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev).fill_(7)
    dst = torch.empty_like(src)
    seconds, _done, iters = _sampled(dev, cuda, lambda: dst.copy_(src))
    return 2 * nbytes * iters / seconds / 1e9


def _sampled(dev: Any, cuda: bool, work: Callable[[], Any]) -> tuple[float, int, int]:
    """(median seconds of one sample, calls of `work` in all, calls per sample)."""
    done, started = 0, time.perf_counter()
    while True:  # on the CPU one call is warm-up enough
        work()
        common.sync(dev)
        done += 1
        if not cuda or time.perf_counter() - started >= WARMUP_S:
            break
    per_call = (time.perf_counter() - started) / done
    iters = max(1, int(SAMPLE_S / per_call) + 1) if cuda else 3
    samples = []
    for _ in range(SAMPLES if cuda else 1):
        samples.append(timed(common.torch_module(), dev, cuda, work, iters))
        done += iters
    return statistics.median(samples), done, iters


def timed(torch: Any, dev: Any, cuda: bool, work: Any, iters: int) -> float:
    """Seconds for `iters` runs of `work` on this device."""
    if cuda:
        with torch.cuda.device(dev):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                work()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1000
    t0 = time.perf_counter()
    for _ in range(iters):
        work()
    return time.perf_counter() - t0


def measure(ctx: CheckContext, devices: list[Any], cuda: bool) -> dict[str, Any]:
    """Every device's figures, one device at a time, each with its NVML energy around its matmuls."""
    shapes = SHAPES[ctx.level] if cuda else [CPU_SHAPE]
    dtype = matmul_dtype(devices[0], cuda)
    by_shape: dict[str, dict[str, float]] = {}
    energy: dict[str, float] = {}
    copy: dict[str, float] = {}
    for i, d in enumerate(devices):
        nvml_index = ctx.host.nvml_index(i)
        before = common.energy_mj([nvml_index]).get(nvml_index) if cuda else None
        count = 0
        for shape in shapes:
            tflops, done = matmul_tflops(d, cuda, shape, dtype)
            by_shape.setdefault(shape_key(shape), {})[str(i)] = round(tflops, 3)
            count += done
        after = common.energy_mj([nvml_index]).get(nvml_index) if cuda else None
        if before is not None and after is not None:
            energy[str(i)] = round((after - before) / 1000 / count, 3)
        copy[str(i)] = round(copy_gbps(d, cuda), 1)
    headline = by_shape[shape_key(shapes[-1])]
    metrics: dict[str, Any] = {
        "matmul_tflops": headline,
        "matmul_tflops_by_shape": by_shape,
        "matmul_tflops_min": min(headline.values()),
        "matmul_dtype": dtype,
        "matmul_shape": shape_key(shapes[-1]),
        "copy_gbps": copy,
        "copy_gbps_min": min(copy.values()),
    }
    if energy:  # NVML's energy counter around each GPU's matmuls, per matmul
        metrics["energy_per_step_j"] = energy
    return metrics


def judge(metrics: dict[str, Any], ctx: CheckContext, gpu_name: str, *, cuda: bool) -> list[Finding]:
    """The figures' findings; on the CPU one line saying they are reported, not judged."""
    if not cuda:
        message = (
            f"CPU: {metrics['matmul_tflops_min']:.2f} TFLOP/s fp32 matmul, {metrics['copy_gbps_min']:.1f} GB/s "
            "memory copy: reported, not judged (GPU expectations do not apply)"
        )
        return [finding("amp.no-tflops-baseline", message)]
    return evaluate(
        metrics,
        ctx,
        gpu_name,
        expectations=load_expectations(),
        baselines=load_baselines(common.path_or_none(ctx.baseline)),
    )


def evaluate(
    metrics: dict[str, Any], ctx: CheckContext, gpu_name: str, *, expectations: Expectations, baselines: Baselines
) -> list[Finding]:
    """Pure: each GPU's matmul and copy figures against its own model's expected figures (first
    line), the recorded-run baseline for the shape (second, tighter line: judged where the first
    passed) and the median of the node's GPUs of its model (the spread). A node may mix models:
    each GPU is the model NVML names it (`gpu_name` where NVML named none)."""
    findings: list[Finding] = []
    for name, members in common.by_model(ctx, [int(i) for i in metrics["copy_gbps"]], gpu_name).items():
        findings += _evaluate_model(metrics, ctx, name, members, expectations=expectations, baselines=baselines)
    return findings


def _evaluate_model(
    metrics: dict[str, Any],
    ctx: CheckContext,
    gpu_name: str,
    members: list[int],
    *,
    expectations: Expectations,
    baselines: Baselines,
) -> list[Finding]:
    dtype = metrics["matmul_dtype"]
    findings: list[Finding] = []
    for shape, per_gpu in metrics["matmul_tflops_by_shape"].items():
        values = {int(i): v for i, v in per_gpu.items() if int(i) in members}
        model = expectations.matmul(gpu_name, dtype, shape)
        findings += _against_model(values, model, ctx, "matmul")
        passed = {i: v for i, v in values.items() if model is None or model.verdict(v) == "pass"}
        findings += _against_baseline(passed, ctx, baselines, gpu_name, shape, dtype)
        findings += outlier_findings(values, ctx, below=expectations.spread, shape=shape)
        if model is None and baselines.expected_tflops(gpu_name, dtype, shape) is None:
            message = f"no {dtype} matmul expectation for {gpu_name} at {shape}: figures recorded, not judged"
            findings.append(finding("amp.no-tflops-baseline", message))
    copy = {int(i): v for i, v in metrics["copy_gbps"].items() if int(i) in members}
    findings += _against_model(copy, expectations.copy(gpu_name), ctx, "copy")
    findings += _copy_outliers(copy, ctx, expectations.spread)
    return findings


def _against_model(values: dict[int, float], expected: Expected | None, ctx: CheckContext, kind: str) -> list[Finding]:
    out = []
    for i, v in values.items():
        verdict = expected.verdict(v) if expected is not None else "pass"
        if expected is not None and verdict != "pass":
            out.append(_model_finding(kind, verdict, f"{ctx.gpu_ref(i).label()}: {expected.text(v)}", ctx.gpu_ref(i)))
    return out


def _model_finding(kind: str, verdict: str, message: str, gpu: Any) -> Finding:
    if kind == "matmul":
        if verdict == "fail":
            return finding("amp.tflops-below-model", message, gpu=gpu)
        return finding("amp.tflops-under-model", message, gpu=gpu)
    if verdict == "fail":
        return finding("amp.copy-bw-below-model", message, gpu=gpu)
    return finding("amp.copy-bw-under-model", message, gpu=gpu)


def _against_baseline(
    per_device: dict[int, float], ctx: CheckContext, baselines: Baselines, name: str, shape: str, dtype: str
) -> list[Finding]:
    expected = baselines.expected_tflops(name, dtype, shape)
    if expected is None:
        return []
    findings = []
    for i, v in per_device.items():
        verdict = baselines.judge(v, expected)
        text = f"{ctx.gpu_ref(i).label()}: {v:.0f} TFLOP/s {dtype} matmul at {shape} vs {expected:.0f} recorded"
        if verdict == "fail":
            findings.append(finding("amp.tflops-low", text, gpu=ctx.gpu_ref(i)))
        elif verdict == "warn":
            findings.append(finding("amp.tflops-under-expected", text, gpu=ctx.gpu_ref(i)))
    return findings


def outlier_findings(per_device: dict[int, float], ctx: CheckContext, *, below: float, shape: str) -> list[Finding]:
    """Pure: a GPU far under the node's median for the same shape is throttled or faulty, with
    or without an expectation for its model."""
    return [
        finding(
            "amp.tflops-outlier",
            f"{ctx.gpu_ref(o.member).label()}: {o.value:.0f} TFLOP/s at {shape}, "
            f"{o.share:.0%} of the node's median {o.reference:.0f} (under {below:.0%})",
            gpu=ctx.gpu_ref(o.member),
        )
        for o in beyond_spread(per_device, spread=below)
    ]


def _copy_outliers(per_device: dict[int, float], ctx: CheckContext, spread: float) -> list[Finding]:
    return [
        finding(
            "amp.copy-bw-outlier",
            f"{ctx.gpu_ref(o.member).label()}: device memory copy {o.value:.0f} GB/s, "
            f"{o.share:.0%} of the node's median {o.reference:.0f} GB/s (under {spread:.0%})",
            gpu=ctx.gpu_ref(o.member),
        )
        for o in beyond_spread(per_device, spread=spread)
    ]
