"""profiler: torch.profiler records CPU activity, and on CUDA kernel events (CUPTI works).

On a GPU node zero CUDA kernel events is a failure (a disabled CUPTI only warns); on the CPU path
the CUDA half cannot run and is reported as skipped. The chrome trace goes into the artifacts.
At the deep level also a memory timeline (torch.profiler's export_memory_timeline, an artifact)
and, when `nsys` is on the PATH of a GPU node, a short Nsight Systems capture of a CUDA matmul.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpuenv.processes import descendants
from gpuenv.verify.catalogue import finding
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize
from gpuenv.verify.workloads import common

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
    import torch  # torch: heavy, loaded only where the check runs
    from torch.profiler import ProfilerActivity, profile  # torch: heavy, loaded only where the check runs

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
    metrics: dict[str, Any] = {
        "cpu_events": cpu_events,
        "cuda_events": cuda_events,
        "top_ops": top,
        "sorted_by": sort_key,
    }
    if ctx.level == "deep":
        found, produced = _deep(model, x, dev, folder, metrics)
        findings += found
        artifacts += produced
    default = f"{cpu_events} CPU events" + (f", {cuda_events} CUDA kernel events" if cuda else "")
    return CheckResult(
        "profiler",
        status_from_findings(findings),
        summary=summarize(findings, default),
        metrics=metrics,
        findings=findings,
        artifacts=artifacts,
    )


NSYS_TIMEOUT = 120
NSYS_WORK = (
    "import torch; a = torch.randn(2048, 2048, device='cuda'); [a @ a for _ in range(20)]; torch.cuda.synchronize()"
)


def _deep(
    model: Any, x: Any, dev: Any, folder: Path | None, metrics: dict[str, Any]
) -> tuple[list[Finding], list[str]]:
    cuda = dev.type == "cuda"
    with tempfile.TemporaryDirectory(prefix="gpuenv-profiler-") as scratch:
        where = folder or Path(scratch)
        timeline = where / "profiler-memory-timeline.json"
        points, error = memory_timeline(model, x, dev, timeline)
        metrics["memory_timeline_points"] = points
        nsys = nsys_capture(where / "nsys-capture") if cuda and shutil.which("nsys") else None
    findings = evaluate_deep(timeline_points=points, timeline_error=error, nsys=nsys)
    artifacts = [str(timeline)] if folder is not None and points else []
    if nsys is not None:
        metrics["nsys"] = nsys
        artifacts += [nsys["report"]] if folder is not None and nsys["ok"] else []
    else:
        why = "nsys is not on the PATH" if cuda else "CPU only"
        findings.append(finding("profiler.nsys-not-checked", f"Nsight Systems not checked: {why}"))
    return findings, artifacts


def evaluate_deep(*, timeline_points: int, timeline_error: str, nsys: dict[str, Any] | None) -> list[Finding]:
    """Pure: the memory timeline has points; an nsys capture, when tried, exits 0 with a report."""
    out = []
    if timeline_points == 0:
        message = f"torch.profiler's memory timeline is empty or failed: {timeline_error or 'no points'}"
        out.append(finding("profiler.memory-timeline-failed", message))
    if nsys is not None and not nsys["ok"]:
        out.append(finding("profiler.nsys-failed", f"nsys profile failed: {nsys['error']}"))
    return out


def memory_timeline(model: Any, x: Any, dev: Any, path: Path) -> tuple[int, str]:
    """(points in the exported timeline, error): a profile with shapes, memory and stacks, as
    export_memory_timeline needs."""
    from torch.profiler import ProfilerActivity, profile  # torch: heavy, loaded only where the check runs

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    try:
        with profile(activities=activities, profile_memory=True, record_shapes=True, with_stack=True) as prof:
            for _ in range(3):
                model(x).sum().backward()
            common.sync(dev)
        prof.export_memory_timeline(str(path), device=str(dev) if dev.type == "cuda" else "cpu")
        data = json.loads(path.read_text())
    except (RuntimeError, ValueError, OSError) as exc:
        return 0, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
    return (len(data[0]) if isinstance(data, list) and data and isinstance(data[0], list) else 0), ""


def nsys_capture(output: Path) -> dict[str, Any]:
    """`nsys profile` of a short CUDA matmul in a fresh Python: exit 0 and a .nsys-rep file."""
    command = ["nsys", "profile", "--force-overwrite", "true", "--trace", "cuda", "--output", str(output)]
    report = output.with_suffix(".nsys-rep")
    # The profiled python ends itself shortly after the timeout (SIGALRM), whatever nsys does.
    work = f"import signal; signal.alarm({NSYS_TIMEOUT + 10}); {NSYS_WORK}"
    proc = subprocess.Popen(
        [*command, sys.executable, "-c", work],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: a timeout ends nsys and everything it started
    )
    try:
        out, err = proc.communicate(timeout=NSYS_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        return {"ok": False, "error": f"no result within {NSYS_TIMEOUT} s", "report": str(report)}
    ok = proc.returncode == 0 and report.is_file()
    error = "" if ok else f"exit {proc.returncode}: {(err or out).strip()[-300:]}"
    return {"ok": ok, "error": error, "report": str(report)}


def kill_tree(proc: subprocess.Popen[str]) -> None:
    """SIGKILL a child started in its own session, its group and every descendant (the profiled
    python may sit in another group), then reap it."""
    tree = [proc.pid, *descendants(proc.pid)]
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in tree:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    proc.communicate()


def _is(event: Any, kind: str) -> bool:
    return str(getattr(event, "device_type", "")).endswith(kind)


def _self_time(avg: Any, cuda: bool) -> float:
    names = ("self_device_time_total", "self_cuda_time_total") if cuda else ("self_cpu_time_total",)
    for name in names:
        value = getattr(avg, name, None)
        if value is not None:
            return float(value)
    return 0.0
