"""The verify engine: runs the selected checks (runner.py drives the worker under a hard-timeout
watchdog, worker_handle.py holds the worker process) and builds the report.

SIGTERM and SIGINT stop the run and still give a (partial) report.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from gpuenv import __version__
from gpuenv.verify import registry
from gpuenv.verify.gpucount import run_findings
from gpuenv.verify.launch import comm_environment, host_identity
from gpuenv.verify.model import CheckResult, Report, decide
from gpuenv.verify.options import OnStart, VerifyOptions
from gpuenv.verify.runner import Run


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_verify(
    opts: VerifyOptions, *, on_result: Callable[[CheckResult], None] | None = None, on_start: OnStart | None = None
) -> Report:
    """Run verify and build its report; never raises for a bad check, only for bad options.

    on_start hears each check as it starts (before its worker starts), on_result as it ends."""
    specs = registry.select(opts.level, opts.checks, opts.site)
    started = now()
    run = Run(opts, on_result, on_start)
    started_at = time.monotonic()
    interrupted = run.execute(specs)
    if not interrupted:
        own = run_findings(
            expect_gpus=opts.expect_gpus,
            baseline=opts.baseline,
            checks=[s.name for s in specs],
            host=run.host,
            no_gpu=run.no_gpu,
        )
        if own is not None:
            run.results.insert(0, own)
            run.on_result(own)
    run.add_time("total", time.monotonic() - started_at)
    done = {r.name for r in run.results}
    if interrupted:
        for spec in specs:
            if spec.name not in done:
                run.results.append(CheckResult(spec.name, "skip", summary=f"not run: interrupted by {interrupted}"))
    verdict = decide(run.results, strict=opts.strict, cpu_only=run.cpu_only, interrupted=interrupted)
    host = {
        **host_identity(),
        "device_decision": run.device_note,
        "gpus": [asdict(g) for g in run.host.gpus],
        "pci_nvidia": list(run.host.pci_nvidia),
        "pci_scope": run.host.pci_scope,
    }
    return Report(
        level=opts.level,
        device=run.device,
        cpu_only=run.cpu_only,
        started=started,
        finished=now(),
        gpuenv_version=__version__,
        host=host,
        stack=run.provided.get("stack", {}),
        checks=run.results,
        verdict=verdict,
        partial=interrupted is not None,
        interrupted=interrupted,
        options={
            "checks": [s.name for s in specs],
            "strict": opts.strict,
            "expect_gpus": opts.expect_gpus,
            "device": opts.device,
            "timeout_s": opts.timeout,
            **({"gpus": list(opts.gpus)} if opts.gpus else {}),
        },
        timings=run.timings,
        multi_node=multi_node(opts.placement, run.provided.get("multi_node")),
    )


def multi_node(placement: dict[str, Any] | None, found: dict[str, Any] | None) -> dict[str, Any] | None:
    """The report's multi_node object: where this node stood in the run, what the check found across
    nodes, and the communication settings (NCCL_*, GLOO_*, ...) its ranks ran with."""
    if placement is None:
        return None
    return {**placement, "comm_env": comm_environment(os.environ), **(found or {})}
