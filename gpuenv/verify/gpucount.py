"""The run's own checks, whatever checks run: a GPU for a run on the GPUs, `--expect-gpus N` against
the GPUs this process can use (NVML's count, else torch's), and options that have no effect in this
run (a warning, never silence). Their findings (verify.*) form a result named "verify", first in the report."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

from gpuenv.platforms import nodes
from gpuenv.types import SITE_PREFIX
from gpuenv.verify.catalogue import finding
from gpuenv.verify.facts import HostFacts
from gpuenv.verify.model import HEALTH, CheckResult, Finding, status_from_findings, summarize

TORCH_COUNT_TIMEOUT = 120.0
TORCH_COUNT = "import torch; print(torch.cuda.device_count())"
# the checks that read --baseline (expected figures): with none of them selected it does nothing
BASELINE_READERS = frozenset({"amp", "allreduce", "models", "fp8", "compile", "onnx"})


def run_findings(
    *, expect_gpus: int | None, baseline: str | None, checks: Sequence[str], host: HostFacts, no_gpu: str | None = None
) -> CheckResult | None:
    """The "verify" result: a run on the GPUs without one (`no_gpu`: why; every check was skipped),
    the GPU count (where the nvml check, which counts them itself, does not run) and the options
    without effect; None when there is nothing to say."""
    findings = [finding("verify.no-gpu", no_gpu)] if no_gpu else []
    if expect_gpus is not None and HEALTH not in checks and not no_gpu:
        counted, source = count_gpus(host)
        findings.append(count_finding(expect_gpus, counted, source))
    readers = BASELINE_READERS & set(checks) or [c for c in checks if c.startswith(SITE_PREFIX)]  # their figures
    if baseline is not None and not readers:
        message = f"--baseline {baseline} has no effect: none of the checks run ({', '.join(checks)}) reads a baseline"
        findings.append(finding("verify.option-unused", message))
    if not findings:
        return None
    default = findings[0].message
    return CheckResult(
        "verify", status_from_findings(findings), summary=summarize(findings, default), findings=findings
    )


def count_finding(expected: int, counted: int | None, source: str) -> Finding:
    """Pure: fewer GPUs than expected (or none that could be counted) fails."""
    if counted is None or counted < expected:
        shown = "no GPU could be counted" if counted is None else f"{counted} GPU(s) visible to this process"
        return finding("verify.gpu-count-short", f"{shown} ({source}); --expect-gpus {expected}")
    return finding("verify.gpu-count", f"{counted} GPU(s) visible to this process ({source}); {expected} expected")


def count_gpus(host: HostFacts) -> tuple[int | None, str]:
    """(GPUs this process may use, how they were counted): NVML's where it loaded, else torch's in
    a child process (torch is never imported by the engine)."""
    if host.loaded:
        return len(host.gpus), nodes.for_smi(host.smi).library
    try:
        proc = subprocess.run(
            [sys.executable, "-c", TORCH_COUNT], capture_output=True, text=True, timeout=TORCH_COUNT_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"NVML: {host.nvml}; torch: {type(exc).__name__}"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].isdigit():
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return None, f"NVML: {host.nvml}; torch: {why}"
    return int(lines[-1]), f"torch.cuda.device_count(); NVML: {host.nvml}"
