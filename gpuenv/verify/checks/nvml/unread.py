"""What the management library could not read, judged by its error class (pure): a GPU lost to any
call fails it (drain), a call that failed otherwise warns naming the call and its code, a reading
the GPU does not have is one info line for the node. The classes come from the adapters' error
tables (gpuenv/adapters/nvml_errors.py, amdsmi_errors.py), so these rules read no library's codes."""

from __future__ import annotations

from typing import Any

from gpuenv.verify import catalogue
from gpuenv.verify.checks.nvml.policy import ref, rule_finding
from gpuenv.verify.facts import SMI_NAMES, NvmlSnapshot
from gpuenv.verify.model import Finding

SHOWN = 3  # calls named in a finding before "and N more"


def gpu_unread(gpu: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every reading of one GPU that could not be taken, at idle and under load (keys of the
    latter end in " under load")."""
    under = (gpu.get("under_load") or {}).get("unread") or {}
    return {**(gpu.get("unread") or {}), **{f"{key} under load": f for key, f in under.items()}}


def unread_findings(snap: NvmlSnapshot, gpus: list[dict[str, Any]], policy: dict[str, Any], smi: str) -> list[Finding]:
    """The node's calls (driver, count) and each visible GPU's, by class; then one info line per
    reading absent on some GPUs."""
    library = SMI_NAMES[smi]
    findings = _node(snap.unread, policy, library)
    absent: dict[str, list[str]] = {}
    for gpu in gpus:
        g = ref(gpu)
        items = gpu_unread(gpu)
        lost = {k: f for k, f in items.items() if f["class"] == "lost"}
        failed = {k: f for k, f in items.items() if f["class"] == "failed"}
        if lost:
            text = f"{g.label()}: lost: {library} answered {_calls(lost)}"
            findings.append(rule_finding(policy, "gpu_lost", text, g))
        if failed:
            text = f"{g.label()}: {library} could not read {_calls(failed)}"
            findings.append(rule_finding(policy, "read_failed", text, g))
        for key, f in items.items():
            if f["class"] == "absent":
                absent.setdefault(f"{key} ({f['code']})", []).append(str(gpu["index"]))
    return findings + [
        catalogue.finding("nvml.unknown", f"unknown on GPU {', '.join(idx)}: {what}") for what, idx in absent.items()
    ]


def _node(unread: dict[str, dict[str, Any]], policy: dict[str, Any], library: str) -> list[Finding]:
    """The calls that take no GPU: without a count no GPU is judged at all, so that fails."""
    findings = []
    for key, f in unread.items():
        said = f"{library} answered {f['code']} to {f['call']}"
        if key == "count":
            findings.append(rule_finding(policy, "gpu_missing", f"{said}: no GPU could be counted or judged", None))
        elif f["class"] == "lost":
            findings.append(rule_finding(policy, "gpu_lost", f"{said} ({key})", None))
        elif f["class"] == "failed":
            findings.append(rule_finding(policy, "read_failed", f"{said} ({key})", None))
        else:
            findings.append(catalogue.finding("nvml.unknown", f"unknown on the node: {key} ({f['code']})"))
    return findings


def _calls(items: dict[str, dict[str, Any]]) -> str:
    """ "GPU_IS_LOST to nvmlDeviceGetName (name), ... and 3 more" """
    said = [f"{f['code']} to {f['call']} ({key})" for key, f in items.items()]
    more = f" and {len(said) - SHOWN} more" if len(said) > SHOWN else ""
    return ", ".join(said[:SHOWN]) + more
