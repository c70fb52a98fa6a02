"""fp8 (deep; sm_89+: L4/L40/Ada, H100/H200, Blackwell): FP8 tensor cores work and how fast.

torch._scaled_mm in e4m3 (per-tensor scales) against the bf16 product of the same matrices within
tolerance, and its TFLOP/s per GPU at 8192^3 (CUDA events, after a warm-up). With
`transformer_engine` installed, te.Linear under fp8_autocast against the same layer in bf16.
Skipped below sm_89 and on the CPU, saying why; a GPU that has FP8 but cannot use it fails.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from typing import Any

from gpuenv.verify.catalogue import finding
from gpuenv.verify.checks import common
from gpuenv.verify.checks.throughput import SAMPLE_S, SAMPLES, WARMUP_S
from gpuenv.verify.checks.throughput import timed as _timed
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize

FIRST_CAPABILITY = (8, 9)
E4M3_MAX = 448.0
TOLERANCE = 0.1  # relative norm gap to bf16: e4m3 keeps 3 mantissa bits; random K=4096 products land near 0.03
SHAPE = (8192, 8192, 8192)
ACCURACY_SHAPE = (1024, 4096, 1024)


def has_fp8(capability: tuple[int, int]) -> bool:
    return capability >= FIRST_CAPABILITY


def evaluate(gaps: dict[int, float], errors: dict[int, str], refs: list[Any]) -> list[Finding]:
    """Pure: every FP8-capable GPU ran _scaled_mm, within TOLERANCE of bf16."""
    out = []
    for i, error in errors.items():
        message = f"{refs[i].label()}: has FP8 tensor cores but torch._scaled_mm failed: {error}"
        out.append(finding("fp8.unsupported", message, gpu=refs[i]))
    for i, gap in gaps.items():
        if not gap <= TOLERANCE:
            message = f"{refs[i].label()}: e4m3 _scaled_mm is {gap:.3f} (relative) from bf16, over {TOLERANCE:g}"
            out.append(finding("fp8.mismatch", message, gpu=refs[i]))
    return out


def quantize(torch: Any, x: Any) -> tuple[Any, Any]:
    """x in e4m3 with a per-tensor scale (its amax maps to the format's largest value)."""
    scale = (x.abs().max().float() / E4M3_MAX).clamp(min=1e-12)
    return (x.float() / scale).to(torch.float8_e4m3fn), scale


def scaled_mm(torch: Any, a: Any, b: Any) -> Any:
    """a @ b through _scaled_mm: a row-major, b column-major (cuBLASLt's FP8 layout)."""
    a8, sa = quantize(torch, a)
    b8, sb = quantize(torch, b)
    b8 = b8.t().contiguous().t()
    return torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


def accuracy_gap(dev: Any) -> float:
    torch = common.torch_module()

    m, k, n = ACCURACY_SHAPE
    gen = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(m, k, device=dev, generator=gen, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, generator=gen, dtype=torch.bfloat16)
    want = (a @ b).float()
    got = scaled_mm(torch, a, b).float()
    return float((got - want).norm() / want.norm())


def tflops(dev: Any) -> float:
    """The median of three timed runs of SHAPE, each about 0.1 s of work, after 0.3 s of warm-up."""
    torch = common.torch_module()

    m, k, n = SHAPE
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    a8, sa = quantize(torch, a)
    b8, sb = quantize(torch, b)
    b8 = b8.t().contiguous().t()

    def work() -> Any:
        return torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < WARMUP_S or done == 0:
        work()
        common.sync(dev)
        done += 1
    iters = max(1, int(SAMPLE_S / ((time.perf_counter() - started) / done)) + 1)
    samples = [_timed(torch, dev, True, work, iters) for _ in range(SAMPLES)]
    return 2 * m * k * n * iters / statistics.median(samples) / 1e12


def transformer_engine_gap(dev: Any) -> float:
    """te.Linear under fp8_autocast vs the same layer in bf16 (relative norm gap of the outputs)."""
    torch = common.torch_module()
    te = importlib.import_module("transformer_engine.pytorch")

    torch.manual_seed(0)
    layer = te.Linear(768, 768, params_dtype=torch.bfloat16).to(dev)
    x = torch.randn(256, 768, device=dev, dtype=torch.bfloat16)
    with torch.no_grad():
        want = layer(x).float()
        with te.fp8_autocast(enabled=True):
            got = layer(x).float()
    return float((got - want).norm() / want.norm())


def run(ctx: CheckContext) -> CheckResult:
    if ctx.device == "cpu":
        return CheckResult("fp8", "skip", summary="FP8 tensor cores: CUDA GPUs of sm_89+ only; this run is CPU only")
    torch = common.torch_module()

    devices = common.workload_devices(ctx.device)
    capable = [i for i, d in enumerate(devices) if has_fp8(tuple(torch.cuda.get_device_capability(d)))]
    if not capable:
        cap = ".".join(map(str, torch.cuda.get_device_capability(devices[0])))
        why = f"{torch.cuda.get_device_name(devices[0])} is sm_{cap.replace('.', '')}: FP8 tensor cores need sm_89+"
        return CheckResult("fp8", "skip", summary=why)
    gaps, errors, per_gpu = _measure(torch, devices, capable)
    refs = [ctx.gpu_ref(i) for i in range(len(devices))]
    findings = evaluate(gaps, errors, refs)
    metrics: dict[str, Any] = {"fp8_tflops": per_gpu, "gaps": {str(i): round(g, 4) for i, g in gaps.items()}}
    if per_gpu:
        findings += judged(common.judge_figures("fp8", metrics, ctx, gpus=len(devices)), ctx)
    findings += _transformer_engine(devices[capable[0]], metrics)
    default = (
        f"e4m3 _scaled_mm within {TOLERANCE:g} of bf16 on {len(capable)} GPU(s); "
        + ", ".join(f"{v:.0f}" for v in per_gpu.values())
        + " TFLOP/s"
    )
    return CheckResult(
        "fp8", status_from_findings(findings), summary=summarize(findings, default), metrics=metrics, findings=findings
    )


def _measure(
    torch: Any, devices: list[Any], capable: list[int]
) -> tuple[dict[int, float], dict[int, str], dict[str, float]]:
    gaps: dict[int, float] = {}
    errors: dict[int, str] = {}
    per_gpu: dict[str, float] = {}
    for i in capable:
        if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
            errors[i] = f"torch {torch.__version__} has no float8_e4m3fn/_scaled_mm"
            continue
        try:
            gaps[i] = accuracy_gap(devices[i])
            per_gpu[str(i)] = round(tflops(devices[i]), 1)
        except RuntimeError as exc:
            errors[i] = str(exc).strip().splitlines()[0][:300]
    return gaps, errors, per_gpu


def judged(verdicts: list[common.FigureVerdict], ctx: CheckContext) -> list[Finding]:
    """Pure: FP8 TFLOP/s against the GPU model's expected figure, or one "no baseline" line."""
    out = []
    for v in verdicts:
        gpu = ctx.gpu_ref(v.gpu_index) if v.gpu_index is not None else None
        if v.verdict == "fail":
            out.append(finding("fp8.figure-low", v.text(gpu), gpu=gpu))
        elif v.verdict == "warn":
            out.append(finding("fp8.figure-under-expected", v.text(gpu), gpu=gpu))
    if any(v.expected is None for v in verdicts):
        message = f"no FP8 TFLOP/s baseline for {verdicts[0].gpu_name}: figures recorded, not judged"
        out.append(finding("fp8.no-baseline", message))
    return out


def _transformer_engine(dev: Any, metrics: dict[str, Any]) -> list[Finding]:
    if importlib.util.find_spec("transformer_engine") is None:
        return [finding("fp8.te-not-checked", "Transformer Engine not installed: fp8_autocast not checked")]
    gap = transformer_engine_gap(dev)
    metrics["te_gap"] = round(gap, 4)
    if gap > TOLERANCE:
        return [finding("fp8.te-mismatch", f"te.Linear under fp8_autocast is {gap:.3f} (relative) from bf16")]
    return []
