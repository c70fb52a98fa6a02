"""onnx (deep): a small convolutional model exported with torch.onnx.export runs in ONNX Runtime
with outputs within tolerance of PyTorch's, and the inference latency of both.

ONNX Runtime uses the CUDA execution provider when onnxruntime-gpu is installed on a GPU node (a
GPU node with only the CPU build warns), the CPU provider otherwise. Needs the `gpuenv[onnx]`
extra (onnx, onnxscript, onnxruntime): skipped, saying so, without it.
"""

from __future__ import annotations

import importlib.util
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuenv.verify.catalogue import finding
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize
from gpuenv.verify.workloads import common

PACKAGES = ("onnx", "onnxscript", "onnxruntime")
RTOL, ATOL = 1e-3, 1e-4
RUNS = {"cpu": 20, "cuda": 100}
BATCH = {"cpu": 8, "cuda": 64}


def missing_packages() -> list[str]:
    return [p for p in PACKAGES if importlib.util.find_spec(p) is None]


def evaluate(*, max_abs: float, max_ref: float, provider: str, cuda: bool) -> list[Finding]:
    """Pure: ONNX Runtime's outputs are within RTOL/ATOL of PyTorch's; a GPU node uses the GPU."""
    out = []
    if not max_abs <= ATOL + RTOL * max_ref:
        message = (
            f"ONNX Runtime ({provider}) output differs from PyTorch's by {max_abs:.2e} (largest output {max_ref:.2e})"
        )
        out.append(finding("onnx.mismatch", message))
    if cuda and provider != "CUDAExecutionProvider":
        message = f"ONNX Runtime ran on {provider} on a GPU node: onnxruntime-gpu is not installed"
        out.append(finding("onnx.cpu-provider", message))
    return out


def small_model(device: Any) -> Any:
    torch = common.torch_module()
    nn = torch.nn

    torch.manual_seed(0)
    return (
        nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, 10),
        )
        .to(device)
        .eval()
    )


def latency_ms(work: Any, runs: int) -> float:
    """The median wall time of `runs` calls after three untimed ones (the caller syncs in `work`)."""
    for _ in range(3):
        work()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def run(ctx: CheckContext) -> CheckResult:
    missing = missing_packages()
    if missing:
        why = f"{', '.join(missing)} not installed: pip install 'gpuenv[onnx]' (onnxruntime-gpu on GPU nodes)"
        return CheckResult("onnx", "skip", summary=why)
    torch = common.torch_module()
    ort = importlib.import_module("onnxruntime")

    dev = common.workload_devices(ctx.device)[0]
    cuda = dev.type == "cuda"
    model = small_model(dev)
    x = torch.randn(BATCH[dev.type], 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(dev)
    with tempfile.TemporaryDirectory(prefix="gpuenv-onnx-") as folder:
        path = Path(folder) / "model.onnx"
        try:
            with torch.no_grad():
                torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"])
        except Exception as exc:  # the export failing is the finding
            cause = exc.__cause__ or exc  # the exporter wraps the real error
            message = f"torch.onnx.export failed: {type(cause).__name__}: {str(cause).strip().splitlines()[0][:300]}"
            return CheckResult("onnx", "fail", summary=message, findings=[finding("onnx.export-failed", message)])
        wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda else ["CPUExecutionProvider"]
        providers = [p for p in wanted if p in ort.get_available_providers()]
        session = ort.InferenceSession(str(path), providers=providers)
    provider = session.get_providers()[0]
    feed = {"x": x.detach().cpu().numpy()}
    got = session.run(None, feed)[0]
    with torch.no_grad(), common.full_fp32():
        want = model(x).cpu().numpy()

        def torch_run() -> None:
            model(x)
            common.sync(dev)

        torch_ms = latency_ms(torch_run, RUNS[dev.type])
    onnx_ms = latency_ms(lambda: session.run(None, feed), RUNS[dev.type])
    max_abs, max_ref = float(abs(got - want).max()), float(abs(want).max())
    findings = evaluate(max_abs=max_abs, max_ref=max_ref, provider=provider, cuda=cuda)
    metrics = {
        "onnx_latency_ms": round(onnx_ms, 3),
        "torch_latency_ms": round(torch_ms, 3),
        "provider": provider,
        "batch": BATCH[dev.type],
        "max_abs_diff": float(f"{max_abs:.3e}"),
        "versions": {p: importlib.import_module(p).__version__ for p in PACKAGES},
    }
    findings += judged(common.judge_figures("onnx", metrics, ctx, gpus=1), cuda)
    default = f"ONNX Runtime ({provider}) matches PyTorch; {onnx_ms:.2f} ms vs {torch_ms:.2f} ms per batch"
    return CheckResult(
        "onnx", status_from_findings(findings), summary=summarize(findings, default), metrics=metrics, findings=findings
    )


def judged(verdicts: list[common.FigureVerdict], cuda: bool) -> list[Finding]:
    """Pure: the latency has no shipped baseline (a `--baseline` file may give one: reported as
    its verdict in the message); on the CPU it is recorded only."""
    out = []
    for v in verdicts:
        if v.expected is None:
            where = v.gpu_name if cuda else "the CPU"
            out.append(
                finding("onnx.no-baseline", f"no ONNX Runtime latency baseline for {where}: recorded, not judged")
            )
        elif v.verdict != "pass":
            out.append(finding("onnx.no-baseline", f"{v.text()}: {v.verdict} (latency is informative only)"))
    return out
