"""The nvml check on AMD Instinct GPUs: AMD SMI read in the shape NVML's snapshot has, judged by
the same rules and policy (rules.py), with AMD's remediations (gpuenv/data/amdsmi-policy.json).

What is read: uncorrectable and correctable ECC counts, bad pages (pending retirement, and pages
that cannot be retired), the hotspot temperature against its critical limit, the power cap in
force against the default, the GFX clock, XGMI link status and compute processes. Not yet read:
samples under load (clocks, violation counters), PCIe link state; the check says so. AMD SMI
without its library or bindings is gpuenv's own tooling missing: `error`, not a GPU failure."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpuenv.adapters import amdsmi as adapter
from gpuenv.verify import catalogue
from gpuenv.verify.checks.nvml.policy import load_policy, rule_finding
from gpuenv.verify.checks.nvml.rules import judged
from gpuenv.verify.context import CheckContext
from gpuenv.verify.facts import NvmlSnapshot, visible, visible_spec
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize
from gpuenv.verify.procs import own_pids

NOT_UNDER_LOAD = "AMD SMI: read at idle; clocks, throttling and violation counters under load not judged yet"


def probe() -> dict[str, Any]:
    """AMD SMI's view of the host, as the worker's NVML probe answers: "nvml" is "ok" or why not."""
    problem = adapter.init()
    if problem:
        return {"smi": "amdsmi", "nvml": problem}
    gpus = adapter.identities()
    if not gpus:
        return {"smi": "amdsmi", "nvml": "no GPU"}
    versions = adapter.driver_versions()
    return {"smi": "amdsmi", "nvml": "ok", "gpus": gpus, "driver": versions["driver"], "cuda_driver": None}


def judge(ctx: CheckContext, *, power_record: tuple[Any, list[Finding]]) -> CheckResult:
    """Read AMD SMI at idle and judge it by the policy; `power_record` is the caps `gpuenv tune
    power` recorded and any warning about that record (snapshot.power_record)."""
    policy = load_policy(Path(ctx.policy) if ctx.policy else None, smi="amdsmi")
    problem = adapter.init()
    if problem:
        return no_amdsmi(ctx, policy, problem)
    snap = NvmlSnapshot.from_dict(adapter.snapshot())
    spec = visible_spec("amdsmi", snap.gpus, os.environ)
    gpus = visible(snap.gpus, spec)
    applied, findings = power_record
    findings = list(findings)
    findings += judged(snap, policy, ctx, visible_spec=spec, own_pids=frozenset(own_pids()), applied=applied)
    findings.append(catalogue.finding("nvml.pcie-not-judged", NOT_UNDER_LOAD))
    names = sorted({g.get("name") or "?" for g in gpus})
    default = f"{len(gpus)} GPU(s) ({', '.join(names)}), amdgpu {snap.driver}, all healthy (AMD SMI)"
    return CheckResult(
        "nvml",
        status_from_findings(findings),
        summary=summarize(findings, default),
        metrics={"gpus": len(gpus), "smi": "amdsmi", "driver": snap.driver, **_temperatures(gpus)},
        findings=findings,
        detail={"snapshot": snap.to_dict()},
    )


def _temperatures(gpus: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Pure: the per-GPU figure fleet comparison reads, by the index this process's torch uses."""
    found = {str(g["cuda_index"]): g["temperature"] for g in gpus if isinstance(g.get("temperature"), int)}
    return {"temperature_c": found} if found else {}


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
