"""The nvml check on AMD Instinct GPUs: AMD SMI read in the shape NVML's snapshot has, judged by
the same rules and policy (rules.py, load_rules.py), with AMD's remediations, limits and wording
(gpuenv/data/amdsmi-policy.json).

What is read at idle: uncorrectable and correctable ECC counts, bad pages (pending retirement, and
pages that cannot be retired), the hotspot temperature against its critical limit, the power cap
in force against the default, the GFX clock, XGMI link status and compute processes. Under load
(the same sampler and load process as NVIDIA's, under_load.py): the GFX clock, hotspot
temperature, socket power and the limits AMD SMI's violation status says are active, sampled
several times, and its residency counters read before and after. Not read: PCIe link state; the
check says so. AMD SMI without its library or bindings is gpuenv's own tooling missing: `error`,
not a GPU failure."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpuenv.adapters import amdsmi as adapter
from gpuenv.processes import own_pids_among
from gpuenv.verify import catalogue
from gpuenv.verify.checks.nvml.policy import load_policy, rule_finding
from gpuenv.verify.checks.nvml.rules import judged
from gpuenv.verify.checks.nvml.under_load import (
    Counters,
    LoadReader,
    LoadStarter,
    gpu_load,
    hold_s,
    per_gpu_figures,
    read_links_under_load,
)
from gpuenv.verify.context import CheckContext
from gpuenv.verify.facts import NvmlSnapshot, visible, visible_spec
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize

NOT_READ = "AMD SMI: PCIe link state not read"
PASSIVE_NOTE = "passive: AMD SMI read without load; clocks and throttling under load not judged"


def residency_s(before: Counters, after: Counters, sampled_s: float) -> dict[str, float]:
    """Pure: the seconds each AMD SMI limit held the GPU between two reads: its residency
    counter's growth as a share of acc_counter's, times the seconds sampled."""
    ticks = after.get("counter", 0) - before.get("counter", 0)
    if ticks <= 0:
        return {}
    shares = {n: (after[n] - before[n]) / ticks for n in after if n != "counter" and n in before}
    return {name: round(max(0.0, share) * sampled_s, 3) for name, share in shares.items()}


AMD_READER = LoadReader(
    sample=adapter.load_sample,
    counters=adapter.violation_counters,
    grown=residency_s,
    links=None,
    not_judged="AMD SMI clocks and throttling under load not judged",
)


def judge(
    ctx: CheckContext,
    *,
    power_record: tuple[Any, list[Finding]],
    passive: bool = False,
    start_load: LoadStarter = gpu_load,
) -> CheckResult:
    """Read AMD SMI, under load (`start_load`, as snapshot.judge's) unless `passive` (or on the CPU
    path), and judge it by the policy; `power_record` is the caps `gpuenv tune power` recorded and
    any warning about that record (snapshot.power_record)."""
    policy = load_policy(Path(ctx.policy) if ctx.policy else None, smi="amdsmi")
    problem = adapter.init()
    if problem:
        return no_amdsmi(ctx, policy, problem)
    snap = NvmlSnapshot.from_dict(adapter.snapshot())
    spec = visible_spec("amdsmi", snap.gpus, os.environ)
    gpus = visible(snap.gpus, spec)
    load_note = PASSIVE_NOTE if passive else _read_under_load(ctx, policy, snap, gpus, start_load)
    gpus = visible(snap.gpus, spec)  # with the readings under load
    applied, findings = power_record
    findings = list(findings)
    findings += judged(snap, policy, ctx, visible_spec=spec, own_pids=own_pids_among(snap.gpus), applied=applied)
    findings += [catalogue.finding("nvml.pcie-not-judged", note) for note in (load_note, NOT_READ) if note]
    names = sorted({g.get("name") or "?" for g in gpus})
    default = f"{len(gpus)} GPU(s) ({', '.join(names)}), amdgpu {snap.driver}, all healthy (AMD SMI)"
    return CheckResult(
        "nvml",
        status_from_findings(findings),
        summary=summarize(findings, default),
        metrics={"gpus": len(gpus), "smi": "amdsmi", "driver": snap.driver, **per_gpu_figures(snap, gpus)},
        findings=findings,
        detail={"snapshot": snap.to_dict()},
    )


def _read_under_load(
    ctx: CheckContext, policy: dict[str, Any], snap: NvmlSnapshot, gpus: list[dict[str, Any]], start_load: LoadStarter
) -> str | None:
    sampling = policy["load_sampling"].get(ctx.level) or policy["load_sampling"]["quick"]
    load = start_load(hold_s(sampling)) if ctx.device == "cuda" else None
    return read_links_under_load(snap, [g["index"] for g in gpus], load, sampling, AMD_READER)


def no_amdsmi(ctx: CheckContext, policy: dict[str, Any], problem: str) -> CheckResult:
    """AMD SMI could not start on an AMD node: gpuenv's tooling is missing (error: exit 3), or the
    GPUs or driver are not usable (fail)."""
    if adapter.missing(problem):
        message = f"AMD SMI cannot be read on this AMD GPU node: {problem}"
        missing = catalogue.finding("nvml.amdsmi-missing", message)
        return CheckResult("nvml", "error", summary=message, findings=[missing])
    if ctx.expect_gpus:
        message = f"AMD SMI shows no GPU ({problem}); {ctx.expect_gpus} expected"
        return CheckResult(
            "nvml", "fail", summary=message, findings=[rule_finding(policy, "gpu_missing", message, None)]
        )
    message = f"AMD SMI cannot start on a GPU node: {problem}"
    failed = catalogue.finding("nvml.amdsmi-init-failed", message)
    return CheckResult("nvml", "fail", summary=message, findings=[failed])
