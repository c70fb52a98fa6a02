"""compile: torch.compile of a small function matches eager (C compiler, Python headers, Triton).

At the deep level also the speedup of torch.compile over eager on one encoder layer of the NLP
workload (BERT-base-shaped on a GPU, in autocast; shrunk on the CPU), forward in inference:
the median of timed runs after the compile and a warm-up.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any

from gpuenv.verify.catalogue import finding
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize
from gpuenv.verify.workloads import common, nlp


def _fn(x: object) -> object:
    import torch  # torch: heavy, loaded only where the check runs

    assert isinstance(x, torch.Tensor)
    return torch.sin(x) * x + torch.relu(x - 0.5) ** 2


def run(ctx: CheckContext) -> CheckResult:
    import torch  # torch: heavy, loaded only where the check runs

    if not hasattr(torch, "compile"):
        return CheckResult("compile", "skip", summary=f"torch {torch.__version__} has no torch.compile")
    dev = common.workload_devices(ctx.device)[0]
    x = torch.randn(4096, device=dev)
    try:
        compiled = torch.compile(_fn)
        got = compiled(x)
    except Exception as exc:  # the compile failing is the finding, not a crash
        message = f"torch.compile failed: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"
        return CheckResult("compile", "fail", summary=message, findings=[finding("compile.failed", message)])
    want = _fn(x)
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):  # type: ignore[arg-type]
        message = "torch.compile result differs from eager"
        return CheckResult(
            "compile",
            "fail",
            summary=message,
            findings=[finding("compile.mismatch", message)],
        )
    if ctx.level != "deep":
        return CheckResult("compile", "pass", summary=f"torch.compile on {dev.type} matches eager")
    eager_ms, compiled_ms = block_timings(dev)
    speedup = eager_ms / compiled_ms
    metrics = {
        "compile_speedup": round(speedup, 3),
        "eager_ms": round(eager_ms, 3),
        "compiled_ms": round(compiled_ms, 3),
    }
    findings = evaluate_speedup(speedup, cuda=dev.type == "cuda")
    findings += judged(common.judge_figures("compile", metrics, ctx, gpus=1), cuda=dev.type == "cuda")
    default = f"torch.compile on {dev.type} matches eager; {speedup_text(speedup)}"
    return CheckResult(
        "compile",
        status_from_findings(findings),
        summary=summarize(findings, default),
        metrics=metrics,
        findings=findings,
    )


SLOWER = 0.8  # on a GPU, compiled this much slower than eager is a broken toolchain, not noise
# Above this, a speedup on one encoder layer says eager's timing was disturbed (a noisy neighbour, a
# first call's overhead), not that inductor is that good: flagged, never shown as the result.
PLAUSIBLE = 10.0


def speedup_text(speedup: float) -> str:
    """Pure: the speedup as the check's summary shows it; an implausible one is flagged, not featured."""
    if speedup > PLAUSIBLE:
        return f"its measured speedup ({speedup:.0f}x) is implausible, over {PLAUSIBLE:g}x: timing noise, not quoted"
    return f"{speedup:.2f}x over eager on the NLP block"


RUNS = {"cpu": 10, "cuda": 50}


def evaluate_speedup(speedup: float, *, cuda: bool) -> list[Finding]:
    """Pure: on a GPU the compiled block must not be clearly slower than eager (the CPU's
    figure is recorded only: inductor's CPU code is not what this node is bought for)."""
    if cuda and not speedup >= SLOWER:
        message = f"torch.compile runs the NLP block at {speedup:.2f}x eager's speed (under {SLOWER:g}x)"
        return [finding("compile.slower-than-eager", message)]
    return []


def judged(verdicts: list[common.FigureVerdict], *, cuda: bool) -> list[Finding]:
    """Pure: the speedup has no shipped baseline; a --baseline file's verdict is reported."""
    out = []
    for v in verdicts:
        if v.expected is None:
            where = v.gpu_name if cuda else "the CPU"
            out.append(finding("compile.no-baseline", f"no compile speedup baseline for {where}: recorded, not judged"))
        elif v.verdict != "pass":
            out.append(finding("compile.slower-than-eager", f"{v.text()}: {v.verdict}"))
    return out


def block_timings(dev: Any) -> tuple[float, float]:
    """Milliseconds per forward of one NLP encoder layer, eager and compiled (medians)."""
    import torch  # torch: heavy, loaded only where the check runs

    size = nlp.size_for(dev.type, "deep")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        size.hidden, size.heads, size.ffn, dropout=0.0, activation="gelu", batch_first=True
    ).to(dev)
    x = torch.randn(size.micro_batch, size.seq_len, size.hidden, device=dev)
    precision = nlp.precision_for(dev)
    autocast = (
        torch.autocast("cuda", dtype=getattr(torch, precision)) if precision != "fp32" else contextlib.nullcontext()
    )
    compiled = torch.compile(layer)

    def median_ms(fn: Any) -> float:
        times = []
        for k in range(RUNS[dev.type] + 3):
            started = time.perf_counter()
            fn(x)
            common.sync(dev)
            if k >= 3:
                times.append((time.perf_counter() - started) * 1000)
        return statistics.median(times)

    with torch.no_grad(), autocast:
        return median_ms(layer), median_ms(compiled)
