"""fp8 (deep): FP8 matrix cores work and how fast, in the e4m3 format the GPU has.

NVIDIA sm_89+ (L4/L40/Ada, H100/H200, Blackwell) and AMD gfx950 (MI350X/MI355X) use OCP e4m3
(`float8_e4m3fn`, largest value 448); AMD gfx942 (MI300X/MI300A/MI325X) uses `float8_e4m3fnuz`
(no negative zero, largest value 240). torch._scaled_mm in that format (per-tensor scales) against
the bf16 product of the same matrices within tolerance, and its TFLOP/s per GPU at 8192^3 (after a
warm-up). With `transformer_engine` installed, te.Linear under fp8_autocast against the same layer
in bf16. Skipped on GPUs without FP8 (below sm_89; gfx90a MI200 and older) and on the CPU, saying
why; a GPU that has FP8 but cannot use it fails.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from dataclasses import dataclass
from typing import Any

from gpuenv.platforms import nodes
from gpuenv.verify.catalogue import finding
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize
from gpuenv.verify.workloads import common
from gpuenv.verify.workloads.throughput import SAMPLE_S, SAMPLES, WARMUP_S
from gpuenv.verify.workloads.throughput import timed as _timed

FIRST_CAPABILITY = (8, 9)
TOLERANCE = 0.1  # relative norm gap to bf16: e4m3 keeps 3 mantissa bits; random K=4096 products land near 0.03
SHAPE = (8192, 8192, 8192)
ACCURACY_SHAPE = (1024, 4096, 1024)


@dataclass(frozen=True)
class Fp8Format:
    dtype: str  # the torch dtype's name
    largest: float  # the format's largest finite value: a tensor's amax is scaled to it


E4M3FN = Fp8Format("float8_e4m3fn", 448.0)  # OCP FP8: NVIDIA sm_89+, AMD gfx950 and gfx12
E4M3FNUZ = Fp8Format("float8_e4m3fnuz", 240.0)  # AMD gfx942: the FNUZ variant (bias 8, no -0)
AMD_FP8 = {"gfx942": E4M3FNUZ, "gfx950": E4M3FN, "gfx1200": E4M3FN, "gfx1201": E4M3FN}


def has_fp8(capability: tuple[int, int]) -> bool:
    return capability >= FIRST_CAPABILITY


def fp8_format(capability: tuple[int, int], arch: str | None = None) -> Fp8Format | None:
    """Pure: the e4m3 format this GPU's matrix cores take, or None without FP8. `arch` is ROCm's
    gcnArchName ("gfx942:sramecc+:xnack-"; None on CUDA), which decides on AMD: ROCm reports
    compute capabilities (gfx90a as 9.0) that say nothing about FP8."""
    if arch:
        return AMD_FP8.get(arch.split(":")[0])
    return E4M3FN if has_fp8(capability) else None


def no_fp8_reason(name: str, capability: tuple[int, int], arch: str | None) -> str:
    if arch:
        return f"{name} is {arch.split(':')[0]}: FP8 needs gfx942 (MI300 series) or gfx950 (MI350 series)"
    return f"{name} is sm_{capability[0]}{capability[1]}: FP8 tensor cores need sm_89+"


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


def quantize(torch: Any, x: Any, fmt: Fp8Format = E4M3FN) -> tuple[Any, Any]:
    """x in the e4m3 format with a per-tensor scale (its amax maps to the format's largest value)."""
    scale = (x.abs().max().float() / fmt.largest).clamp(min=1e-12)
    return (x.float() / scale).to(getattr(torch, fmt.dtype)), scale


def scaled_mm(torch: Any, a: Any, b: Any, fmt: Fp8Format = E4M3FN) -> Any:
    """a @ b through _scaled_mm: a row-major, b column-major (cuBLASLt's and hipBLASLt's FP8 layout)."""
    a8, sa = quantize(torch, a, fmt)
    b8, sb = quantize(torch, b, fmt)
    b8 = b8.t().contiguous().t()
    return torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


def accuracy_gap(dev: Any, fmt: Fp8Format = E4M3FN) -> float:
    torch = common.torch_module()

    m, k, n = ACCURACY_SHAPE
    gen = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(m, k, device=dev, generator=gen, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, generator=gen, dtype=torch.bfloat16)
    want = (a @ b).float()
    got = scaled_mm(torch, a, b, fmt).float()
    return float((got - want).norm() / want.norm())


def tflops(dev: Any, fmt: Fp8Format = E4M3FN) -> float:
    """The median of three timed runs of SHAPE, each about 0.1 s of work, after 0.3 s of warm-up."""
    torch = common.torch_module()

    m, k, n = SHAPE
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    a8, sa = quantize(torch, a, fmt)
    b8, sb = quantize(torch, b, fmt)
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
        return CheckResult(
            "fp8", "skip", summary="FP8 matrix cores: GPUs of sm_89+, gfx942 or gfx950 only; this run is CPU only"
        )
    torch = common.torch_module()

    devices = common.workload_devices(ctx.device)
    formats = {i: _format_of(torch, d) for i, d in enumerate(devices)}
    capable = {i: f for i, f in formats.items() if f is not None}
    if not capable:
        dev = devices[0]
        why = no_fp8_reason(torch.cuda.get_device_name(dev), torch.cuda.get_device_capability(dev), _arch(torch, dev))
        return CheckResult("fp8", "skip", summary=why)
    gaps, errors, per_gpu = _measure(torch, devices, capable)
    refs = [ctx.gpu_ref(i) for i in range(len(devices))]
    findings = evaluate(gaps, errors, refs)
    metrics: dict[str, Any] = {"fp8_tflops": per_gpu, "gaps": {str(i): round(g, 4) for i, g in gaps.items()}}
    if per_gpu:
        findings += judged(common.judge_figures("fp8", metrics, ctx, gpus=len(devices)), ctx)
    metrics["formats"] = sorted({f.dtype for f in capable.values()})
    findings += _transformer_engine(devices[min(capable)], metrics)
    default = (
        f"{'/'.join(metrics['formats'])} _scaled_mm within {TOLERANCE:g} of bf16 on {len(capable)} GPU(s); "
        + ", ".join(f"{v:.0f}" for v in per_gpu.values())
        + " TFLOP/s"
    )
    return CheckResult(
        "fp8", status_from_findings(findings), summary=summarize(findings, default), metrics=metrics, findings=findings
    )


def _arch(torch: Any, dev: Any) -> str | None:
    """The GPU's code beside its compute capability as its platform reads it (ROCm's gcnArchName); None on CUDA."""
    node = nodes.for_torch(torch.version)
    return node.torch_arch(torch, dev) if node else None


def _format_of(torch: Any, dev: Any) -> Fp8Format | None:
    return fp8_format(tuple(torch.cuda.get_device_capability(dev)), _arch(torch, dev))


def _measure(
    torch: Any, devices: list[Any], capable: dict[int, Fp8Format]
) -> tuple[dict[int, float], dict[int, str], dict[str, float]]:
    gaps: dict[int, float] = {}
    errors: dict[int, str] = {}
    per_gpu: dict[str, float] = {}
    for i, fmt in capable.items():
        if not hasattr(torch, fmt.dtype) or not hasattr(torch, "_scaled_mm"):
            errors[i] = f"torch {torch.__version__} has no {fmt.dtype}/_scaled_mm"
            continue
        try:
            gaps[i] = accuracy_gap(devices[i], fmt)
            per_gpu[str(i)] = round(tflops(devices[i], fmt), 1)
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
