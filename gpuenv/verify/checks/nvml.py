"""nvml: GPU health as NVML reports it, judged by a policy file users can override.

`evaluate` is pure: an NVML snapshot (see gpuenv.adapters.nvml.snapshot) and the policy in,
findings out. Every finding names the GPU (index, UUID, PCI bus id).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuenv.errors import BadRequest
from gpuenv.resources import data_file
from gpuenv.schema import load as load_data_file
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, GpuRef, info, status_from_findings, summarize

POLICY_SCHEMA = "gpuenv.nvml-policy/1"
FABRIC_COMPLETED = 3


def load_policy(path: Path | None = None) -> dict[str, Any]:
    """The shipped policy, with a user's file laid over it (rules merge one by one)."""
    policy: dict[str, Any] = json.loads(data_file("nvml-policy.json").read_text())
    if path is None:
        return policy
    try:
        user = load_data_file(path, "NVML policy", "nvml-policy")  # size cap, JSON Schema (gpuenv.schema)
    except (OSError, ValueError) as exc:
        raise BadRequest(
            f"cannot read NVML policy {path}: {exc}",
            hint="give a JSON file in the format of gpuenv/data/nvml-policy.json",
        ) from exc
    if not isinstance(user, dict) or user.get("schema") != POLICY_SCHEMA:
        raise BadRequest(
            f"bad NVML policy {path}: schema must be {POLICY_SCHEMA!r}", hint="see gpuenv/data/nvml-policy.json"
        )
    for name, rule in user.get("rules", {}).items():
        if name not in policy["rules"] or rule.get("severity", "fail") not in ("fail", "warn", "info"):
            raise BadRequest(
                f"bad NVML policy {path}: unknown rule or severity in {name!r}",
                hint=f"rules: {', '.join(sorted(policy['rules']))}",
            )
        policy["rules"][name] = {**policy["rules"][name], **rule}
    for key in ("fatal_xids", "xid_actions", "other_xid", "problem_clock_events", "temperature_margin_c"):
        if key in user:
            policy[key] = user[key]
    return policy


def visible(gpus: list[dict[str, Any]], cuda_visible: str | None) -> list[dict[str, Any]]:
    """The GPUs this process may use (CUDA_VISIBLE_DEVICES by index or UUID), in CUDA order."""
    if cuda_visible is None:
        chosen = list(gpus)
    else:
        chosen = []
        for token in filter(None, (t.strip() for t in cuda_visible.split(","))):
            match = next(
                (
                    g
                    for g in gpus
                    if (token.isdigit() and g["index"] == int(token))
                    or (g.get("uuid") and str(g["uuid"]).startswith(token))
                ),
                None,
            )
            if match is None:
                break  # CUDA stops at the first invalid entry
            chosen.append(match)
    return [{**g, "cuda_index": i} for i, g in enumerate(chosen)]


def _finding(policy: dict[str, Any], rule: str, message: str, gpu: GpuRef | None) -> Finding:
    r = policy["rules"][rule]
    return Finding(r["severity"], message, r.get("remediation"), r.get("action", "none"), gpu, rule)


def ref(gpu: dict[str, Any]) -> GpuRef:
    return GpuRef(gpu["index"], gpu.get("uuid"), gpu.get("pci_bus_id"))


def evaluate(
    snap: dict[str, Any],
    policy: dict[str, Any],
    *,
    expect_gpus: int | None,
    cuda_visible: str | None,
    pci_nvidia: list[str],
) -> list[Finding]:
    gpus = visible(snap["gpus"], cuda_visible)
    findings = _count_findings(snap, gpus, policy, expect_gpus, pci_nvidia)
    for gpu in gpus:
        findings += gpu_findings(gpu, policy)
    return findings


def _count_findings(
    snap: dict[str, Any],
    gpus: list[dict[str, Any]],
    policy: dict[str, Any],
    expect_gpus: int | None,
    pci_nvidia: list[str],
) -> list[Finding]:
    findings = []
    if expect_gpus is not None and len(gpus) < expect_gpus:
        findings.append(
            _finding(
                policy,
                "gpu_missing",
                f"NVML shows {len(gpus)} GPU(s) visible to this process, {expect_gpus} expected",
                None,
            )
        )
    seen = {_short_bus(g.get("pci_bus_id")) for g in snap["gpus"]}
    for bus in pci_nvidia:
        if _short_bus(bus) not in seen:
            findings.append(
                _finding(
                    policy,
                    "gpu_missing",
                    f"NVIDIA GPU at PCI {bus} is on the bus but NVML cannot see it (fallen off the bus)",
                    GpuRef(-1, None, bus),
                )
            )
    return findings


def _short_bus(bus: str | None) -> str:
    """PCI bus ids compare without the domain's width: 00000000:17:00.0 ~ 0000:17:00.0."""
    if not bus:
        return ""
    domain, _, rest = bus.lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus.lower()


def gpu_findings(gpu: dict[str, Any], policy: dict[str, Any]) -> list[Finding]:
    g = ref(gpu)
    label = g.label()
    out: list[Finding] = []
    if gpu.get("ecc_uncorrected"):
        out.append(
            _finding(
                policy,
                "ecc_uncorrected",
                f"{label}: {gpu['ecc_uncorrected']} uncorrectable ECC error(s) since the driver loaded",
                g,
            )
        )
    if gpu.get("retired_pages_pending"):
        out.append(_finding(policy, "retired_pages_pending", f"{label}: retired pages pending", g))
    rows = gpu.get("remapped_rows") or {}
    if rows.get("pending"):
        out.append(_finding(policy, "remapped_rows_pending", f"{label}: row remapping pending", g))
    if rows.get("failure"):
        out.append(_finding(policy, "remapped_rows_failure", f"{label}: row remapping failed", g))
    out += _pcie(gpu, policy, g, label) + _clocks(gpu, policy, g, label)
    if gpu.get("persistence") == 0:
        out.append(_finding(policy, "persistence_off", f"{label}: persistence mode is off", g))
    out += _thermal(gpu, policy, g, label)
    if gpu.get("nvlink_down"):
        links = ", ".join(str(n) for n in gpu["nvlink_down"])
        out.append(_finding(policy, "nvlink_down", f"{label}: NVLink link(s) {links} down", g))
    if gpu.get("processes"):
        pids = ", ".join(str(p) for p in gpu["processes"])
        out.append(_finding(policy, "leftover_processes", f"{label}: compute processes still running: {pids}", g))
    if gpu.get("mig") == 1:
        out.append(_finding(policy, "mig_enabled", f"{label}: MIG mode enabled", g))
    fabric = gpu.get("fabric")
    if fabric and fabric["state"] and (fabric["state"] != FABRIC_COMPLETED or fabric["status"] != 0):
        out.append(
            _finding(
                policy,
                "fabric_not_ready",
                f"{label}: NVSwitch fabric state {fabric['state']}, status {fabric['status']}",
                g,
            )
        )
    return out


def _pcie(gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef, label: str) -> list[Finding]:
    p = gpu.get("pcie") or {}
    if None in (p.get("gen"), p.get("max_gen"), p.get("width"), p.get("max_width")):
        return []
    if p["gen"] < p["max_gen"] or p["width"] < p["max_width"]:
        return [
            _finding(
                policy,
                "pcie_downgraded",
                f"{label}: PCIe link Gen{p['gen']} x{p['width']}, below its maximum "
                f"Gen{p['max_gen']} x{p['max_width']} under load",
                g,
            )
        ]
    return []


def _clocks(gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef, label: str) -> list[Finding]:
    reasons = gpu.get("clock_events")
    if not reasons:
        return []
    named = [name for bit, name in policy["problem_clock_events"].items() if reasons & int(bit, 16)]
    if not named:
        return []
    return [
        _finding(
            policy, "clock_slowdown", f"{label}: clocks held down by {', '.join(named)} (reasons 0x{reasons:x})", g
        )
    ]


def _thermal(gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef, label: str) -> list[Finding]:
    temp, limit = gpu.get("temperature"), gpu.get("slowdown_temperature")
    if temp is None or not limit or temp < limit - policy["temperature_margin_c"]:
        return []
    return [_finding(policy, "temperature", f"{label}: {temp} °C, slowdown at {limit} °C", g)]


def xid_findings(events: list[tuple[int, int]], gpus: list[dict[str, Any]], policy: dict[str, Any]) -> list[Finding]:
    out = []
    by_index = {g["index"]: g for g in gpus}
    fatal = set(policy["fatal_xids"])
    for index, xid in events:
        g = ref(by_index[index]) if index in by_index else GpuRef(index)
        action = policy["xid_actions"].get(str(xid), "reset-gpu")
        if xid in fatal:
            out.append(
                Finding(
                    "fail",
                    f"{g.label()}: XID {xid} during the run",
                    f"XID {xid} is fatal: {action.replace('-', ' ')}, then rerun verify; drain if it recurs",
                    action,
                    g,
                    "xid",
                )
            )
        else:
            other = policy["other_xid"]
            out.append(
                Finding(
                    other["severity"],
                    f"{g.label()}: XID {xid} during the run",
                    "watch the kernel log (dmesg) for further XIDs",
                    other["action"],
                    g,
                    "xid",
                )
            )
    return out


def unknown_findings(snap: dict[str, Any]) -> list[Finding]:
    """One info line per item NVML could not report (NOT_SUPPORTED etc.): unknown, not a failure."""
    items: dict[str, list[str]] = {}
    for gpu in snap["gpus"]:
        for key, why in gpu.get("unknown", {}).items():
            items.setdefault(f"{key} ({why})", []).append(str(gpu["index"]))
    return [info(f"unknown on GPU {', '.join(idx)}: {what}", item="unknown") for what, idx in items.items()]


# ---- the part that talks to NVML (runs in the worker) -------------------------------------


def run(ctx: CheckContext) -> CheckResult:
    import os

    from gpuenv.adapters import nvml as adapter

    policy = load_policy(Path(ctx.policy) if ctx.policy else None)
    problem = adapter.init()
    if problem:
        if ctx.expect_gpus:
            message = f"NVML shows no GPU ({problem}); {ctx.expect_gpus} expected"
            return CheckResult(
                "nvml", "fail", summary=message, findings=[_finding(policy, "gpu_missing", message, None)]
            )
        if ctx.device == "cpu":
            return CheckResult("nvml", "skip", summary=f"CPU only: NVML {problem}")
        message = f"NVML cannot start on a GPU node: {problem}"
        return CheckResult("nvml", "fail", summary=message, findings=[init_finding(message, problem)])
    snap = adapter.snapshot()
    with_load = _under_load(ctx)
    if with_load:
        snap = with_load
    gpus = visible(snap["gpus"], os.environ.get("CUDA_VISIBLE_DEVICES"))
    ctx.facts["gpus"] = [
        {k: g.get(k) for k in ("index", "cuda_index", "name", "uuid", "serial", "pci_bus_id", "compute_capability")}
        for g in gpus
    ]
    ctx.facts["driver"] = {"driver": snap["driver"], "cuda_driver": snap["cuda_driver"]}
    missing = adapter.register_xids(ctx.state, len(snap["gpus"]))
    ctx.state["nvml_gpus"] = snap["gpus"]
    findings = evaluate(
        snap,
        policy,
        expect_gpus=ctx.expect_gpus,
        cuda_visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
        pci_nvidia=ctx.facts.get("pci_nvidia", []),
    )
    findings += xid_findings(adapter.drain_xids(ctx.state), snap["gpus"], policy)
    findings += unknown_findings(snap)
    if missing:
        findings.append(info(f"XID events not watched on {', '.join(missing)}", item="unknown"))
    names = sorted({g.get("name") or "?" for g in gpus})
    default = f"{len(gpus)} GPU(s) ({', '.join(names)}), driver {snap['driver']}, all healthy"
    return CheckResult(
        "nvml",
        status_from_findings(findings),
        summary=summarize(findings, default),
        metrics={"gpus": len(gpus), "driver": snap["driver"], "cuda_driver": snap["cuda_driver"]},
        findings=findings,
        detail={"snapshot": snap},
    )


def init_finding(message: str, problem: str) -> Finding:
    if problem == "driver-not-loaded":
        fix = "load the NVIDIA kernel module (modprobe nvidia; check dmesg) or reinstall the driver"
    elif problem == "library-not-found":
        fix = "install the NVIDIA driver (it ships libnvidia-ml.so.1)"
    else:
        fix = "reinstall the NVIDIA driver so library and kernel module match, then reboot"
    return Finding("fail", message, fix, "reinstall-driver", None, "init")


def _under_load(ctx: CheckContext) -> dict[str, Any] | None:
    """Re-read NVML while the GPUs run matmuls (PCIe links down-train when idle); CUDA only."""
    if ctx.device != "cuda":
        return None
    try:
        import threading

        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    from gpuenv.adapters import nvml as adapter

    stop = threading.Event()

    def load(i: int) -> None:
        a = torch.randn(4096, 4096, device=f"cuda:{i}")
        while not stop.is_set():
            a @ a
            torch.cuda.synchronize(i)

    threads = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(torch.cuda.device_count())]
    for t in threads:
        t.start()
    try:
        import time

        time.sleep(0.5)
        return adapter.snapshot()
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)


def drain_xids(ctx: CheckContext) -> list[Finding]:
    """XIDs seen since the nvml check registered for them (asked for at the end of the run)."""
    if "xid_set" not in ctx.state:
        return []
    from gpuenv.adapters import nvml as adapter

    policy = load_policy(Path(ctx.policy) if ctx.policy else None)
    return xid_findings(adapter.drain_xids(ctx.state), ctx.state.get("nvml_gpus", []), policy)
