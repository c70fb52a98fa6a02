"""profiler: torch.profiler records CPU activity, and on CUDA kernel events (CUPTI works).

On a GPU node zero CUDA kernel events is a failure (a disabled CUPTI only warns); on the CPU path
the CUDA half cannot run and is reported as skipped. The chrome trace goes into the artifacts.
"""

from __future__ import annotations

from typing import Any

from gpuenv.verify.catalogue import finding
from gpuenv.verify.checks import common
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize

TOP = 5


def evaluate(*, cpu_events: int, cuda_events: int, cuda: bool) -> list[Finding]:
    """Pure: CPU events must be recorded; CUDA kernel events too where CUDA is expected."""
    out = []
    if cpu_events == 0:
        out.append(finding("profiler.no-cpu-events", "torch.profiler recorded no CPU events"))
    if cuda and cuda_events == 0:
        message = "torch.profiler recorded no CUDA kernel events: CUPTI is missing or disabled"
        out.append(finding("profiler.no-cuda-events", message))
    if not cuda:
        out.append(finding("profiler.cuda-not-checked", "CUDA activity not checked: CPU only"))
    return out


def run(ctx: CheckContext) -> CheckResult:
    import torch
    from torch.profiler import ProfilerActivity, profile

    dev = common.workload_devices(ctx.device)[0]
    cuda = dev.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
    x = torch.randn(64, 256, device=dev)
    with profile(activities=activities, profile_memory=True, record_shapes=False) as prof:
        for _ in range(5):
            model(x).sum().backward()
        common.sync(dev)
    events = prof.events()
    cpu_events = sum(1 for e in events if _is(e, "CPU"))
    cuda_events = sum(1 for e in events if _is(e, "CUDA"))
    findings = evaluate(cpu_events=cpu_events, cuda_events=cuda_events, cuda=cuda)
    artifacts = []
    folder = ctx.artifacts()
    if folder is not None:
        trace = folder / "profiler-trace.json"
        prof.export_chrome_trace(str(trace))
        artifacts.append(str(trace))
    sort_key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    top = [
        {"op": a.key, "calls": a.count, "self_us": round(_self_time(a, cuda), 1)}
        for a in sorted(prof.key_averages(), key=lambda a: -_self_time(a, cuda))[:TOP]
    ]
    default = f"{cpu_events} CPU events" + (f", {cuda_events} CUDA kernel events" if cuda else "")
    return CheckResult(
        "profiler",
        status_from_findings(findings),
        summary=summarize(findings, default),
        metrics={"cpu_events": cpu_events, "cuda_events": cuda_events, "top_ops": top, "sorted_by": sort_key},
        findings=findings,
        artifacts=artifacts,
    )


def _is(event: Any, kind: str) -> bool:
    return str(getattr(event, "device_type", "")).endswith(kind)


def _self_time(avg: Any, cuda: bool) -> float:
    names = ("self_device_time_total", "self_cuda_time_total") if cuda else ("self_cpu_time_total",)
    for name in names:
        value = getattr(avg, name, None)
        if value is not None:
            return float(value)
    return 0.0
