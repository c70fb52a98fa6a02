"""The nvml check as the worker runs it: NVML's snapshot read at idle, the links re-read and the
clocks, reasons, temperature and power sampled under load, all judged by the policy (rules.py);
the per-GPU figures fleet comparison reads. `judge` is the same check without load, in the
calling process (`gpuenv verify --check nvml --passive`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuenv.adapters import nvml as adapter
from gpuenv.power import record
from gpuenv.processes import own_pids_among
from gpuenv.types import Smi
from gpuenv.verify import catalogue
from gpuenv.verify.checks.nvml import amd
from gpuenv.verify.checks.nvml.policy import load_policy, rule_finding
from gpuenv.verify.checks.nvml.rules import init_finding, judged
from gpuenv.verify.checks.nvml.under_load import LoadStarter, gpu_load, hold_s, per_gpu_figures, read_links_under_load
from gpuenv.verify.context import CheckContext
from gpuenv.verify.facts import NvmlSnapshot, visible
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize

COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}


PASSIVE_NOTE = "passive: read without load; PCIe generation, clocks and throttling under load not judged"


def run(ctx: CheckContext) -> CheckResult:
    return judge(ctx, passive=False)


def judge(ctx: CheckContext, *, passive: bool, start_load: LoadStarter = gpu_load) -> CheckResult:
    """Read NVML, under load (`start_load`) unless `passive` (or on the CPU path), and judge it by
    the policy; on an AMD node, AMD SMI by the same rules and sampler (amd.py)."""
    return READERS[ctx.host.smi](ctx, passive, start_load)


def judge_nvml(ctx: CheckContext, passive: bool, start_load: LoadStarter) -> CheckResult:
    """NVML's reading and judging (AMD SMI's: amd.py)."""
    policy = load_policy(Path(ctx.policy) if ctx.policy else None)
    started = time.monotonic()
    problem = adapter.init()
    init_s = round(time.monotonic() - started, 3)  # fast where the probe holds NVML already
    if problem:
        return _no_nvml(ctx, policy, problem)
    snap = NvmlSnapshot.from_dict(adapter.snapshot())  # idle: processes, width, everything else
    cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = visible(snap.gpus, cuda_visible)
    if passive:
        load_note: str | None = PASSIVE_NOTE
    else:
        sampling = policy["load_sampling"].get(ctx.level) or policy["load_sampling"]["quick"]
        load = start_load(hold_s(sampling)) if ctx.device == "cuda" else None
        load_note = read_links_under_load(snap, [g["index"] for g in gpus], load, sampling)
        gpus = visible(snap.gpus, cuda_visible)  # with the readings under load
    applied, findings = power_record()
    slowest = max(init_s, ctx.host.nvml_init_s or 0.0)  # the probe's start (the run's first), or this one
    findings += judged(
        snap,
        policy,
        ctx,
        visible_spec=cuda_visible,
        own_pids=own_pids_among(snap.gpus),
        applied=applied,
        init_s=slowest,
    )
    if load_note:
        findings.append(catalogue.finding("nvml.pcie-not-judged", load_note))
    if ctx.host.pci_reference is None and ctx.host.on_bus():
        message = f"in a {ctx.host.pci_scope}: GPUs on the host's PCI bus not compared with NVML"
        findings.append(catalogue.finding("nvml.bus-not-compared", message))
    names = sorted({g.get("name") or "?" for g in gpus})
    modes = sorted(
        {COMPUTE_MODES.get(int(g["compute_mode"]), "unknown") for g in gpus if g.get("compute_mode") is not None}
    )
    default = f"{len(gpus)} GPU(s) ({', '.join(names)}), driver {snap.driver}, all healthy"
    return CheckResult(
        "nvml",
        status_from_findings(findings),
        summary=summarize(findings, default),
        metrics={
            "gpus": len(gpus),
            "driver": snap.driver,
            "cuda_driver": snap.cuda_driver,
            "compute_modes": modes,
            "init_s": init_s,
            **per_gpu_figures(snap, gpus),
        },
        findings=findings,
        detail={"snapshot": snap.to_dict()},
    )


def power_record() -> tuple[list[record.AppliedCap] | None, list[Finding]]:
    """The caps `gpuenv tune power` recorded; a record that cannot be trusted is ignored, with a warning."""
    path = record.location()
    try:
        return record.read(path), []
    except record.RecordIgnored as exc:
        return None, [catalogue.finding("nvml.power-record-ignored", f"{exc}: ignored")]


def _no_nvml(ctx: CheckContext, policy: dict[str, Any], problem: str) -> CheckResult:
    if ctx.expect_gpus:
        message = f"NVML shows no GPU ({problem}); {ctx.expect_gpus} expected"
        return CheckResult(
            "nvml", "fail", summary=message, findings=[rule_finding(policy, "gpu_missing", message, None)]
        )
    if ctx.device == "cpu":
        return CheckResult("nvml", "skip", summary=f"CPU only: NVML {problem}")
    message = f"NVML cannot start on a GPU node: {problem}"
    return CheckResult("nvml", "fail", summary=message, findings=[init_finding(message, problem)])


def judge_amdsmi(ctx: CheckContext, passive: bool, start_load: LoadStarter) -> CheckResult:
    return amd.judge(ctx, power_record=power_record(), passive=passive, start_load=start_load)


# Each management library's reader, by its wire name (gpuenv.platforms.node.GpuNode.smi): what they read
# differs, the rules (rules.py, load_rules.py) and the policy they are judged by are one.
READERS: dict[Smi, Callable[[CheckContext, bool, LoadStarter], CheckResult]] = {
    "nvml": judge_nvml,
    "amdsmi": judge_amdsmi,
}
