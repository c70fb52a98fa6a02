"""nvml: GPU health as NVML reports it, judged by a policy file users can override.

`evaluate` is pure: an NVML snapshot (see gpuenv.adapters.nvml.snapshot) and the policy in,
findings out. Every finding names the GPU (index, UUID, PCI bus id).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuenv.errors import BadRequest
from gpuenv.resources import data_file
from gpuenv.schema import load as load_data_file
from gpuenv.verify import catalogue
from gpuenv.verify.context import CheckContext
from gpuenv.verify.facts import GpuInfo, HostFacts, NvmlSnapshot, visible
from gpuenv.verify.model import CheckResult, Finding, GpuRef, status_from_findings, summarize

POLICY_SCHEMA = "gpuenv.nvml-policy/1"
FABRIC_NOT_SUPPORTED, FABRIC_COMPLETED = 0, 3
COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}
LOAD_READY_S = 30.0  # the load process imports torch and starts every GPU
LINK_POLL_S = 2.0  # links retrain within milliseconds of load; poll briefly for the maximum


def load_policy(path: Path | None = None) -> dict[str, Any]:
    """The shipped policy and the catalogue's nvml.* rules, with a user's file laid over them
    (rules merge one by one)."""
    policy: dict[str, Any] = json.loads(data_file("nvml-policy.json").read_text())
    policy["rules"] = {
        r.code.split(".", 1)[1]: {"severity": r.severity, "action": r.action, "remediation": r.remediation}
        for r in catalogue.rules().values()
        if r.check == "nvml"
    }
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
    for key in (
        "fatal_xids",
        "xid_actions",
        "other_xid",
        "problem_clock_events",
        "temperature_margin_c",
        "memory_held_mib",
    ):
        if key in user:
            policy[key] = user[key]
    return policy


def _finding(policy: dict[str, Any], rule: str, message: str, gpu: GpuRef | None, **fields: Any) -> Finding:
    """The nvml.RULE finding, with the policy's severity, action and remediation for it."""
    r = policy["rules"][rule]
    code = f"nvml.{rule}"
    entry = catalogue.Rule(
        code, r["severity"], r.get("action", "none"), r.get("remediation"), catalogue.rules()[code].item
    )
    return catalogue.finding(code, message, gpu=gpu, rule=entry, **fields)


def ref(gpu: dict[str, Any]) -> GpuRef:
    return GpuRef(gpu["index"], gpu.get("uuid"), gpu.get("pci_bus_id"))


def evaluate(
    snap: NvmlSnapshot,
    policy: dict[str, Any],
    *,
    expect_gpus: int | None,
    cuda_visible: str | None,
    host: HostFacts,
    own_pids: frozenset[int] = frozenset(),
) -> list[Finding]:
    """Pure: the snapshot judged by the policy. `own_pids` are the run's own processes (never
    leftovers); `host.pci_reference` the bus ids NVML must see (None: not judged here)."""
    gpus = visible(snap.gpus, cuda_visible)
    findings = _count_findings(snap, gpus, policy, expect_gpus, host)
    for gpu in gpus:
        findings += gpu_findings(gpu, policy, own_pids=own_pids)
    findings += _fabric_cliques(gpus, policy)
    return findings


def _count_findings(
    snap: NvmlSnapshot,
    gpus: list[dict[str, Any]],
    policy: dict[str, Any],
    expect_gpus: int | None,
    host: HostFacts,
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
    seen = {_short_bus(g.get("pci_bus_id")) for g in snap.gpus}
    for bus in host.pci_reference or ():
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


def gpu_findings(
    gpu: dict[str, Any], policy: dict[str, Any], *, own_pids: frozenset[int] = frozenset()
) -> list[Finding]:
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
    leftovers = [p for p in gpu.get("processes") or [] if p not in own_pids]
    if leftovers:
        pids = ", ".join(str(p) for p in leftovers)
        out.append(_finding(policy, "leftover_processes", f"{label}: compute processes still running: {pids}", g))
    out += _memory_held(gpu, policy, g, label)
    if gpu.get("mig") == 1:
        out.append(_finding(policy, "mig_enabled", f"{label}: MIG mode enabled", g))
    out += _compute_mode(gpu, policy, g, label)
    fabric = gpu.get("fabric")
    if (
        fabric
        and fabric["state"] != FABRIC_NOT_SUPPORTED
        and (fabric["state"] != FABRIC_COMPLETED or fabric["status"] != 0)
    ):
        states = {1: "not started", 2: "in progress", 3: "completed"}
        out.append(
            _finding(
                policy,
                "fabric_not_ready",
                f"{label}: outside the NVSwitch fabric (registration {states.get(fabric['state'], fabric['state'])}, "
                f"status {fabric['status']})",
                g,
            )
        )
    return out


def _memory_held(gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef, label: str) -> list[Finding]:
    """Memory in use while NVML lists no compute process at all (not even gpuenv's own): a context
    the driver kept after its process ended. MIG GPUs list processes per instance: not judged."""
    used = gpu.get("memory_used_mib")
    unread = "processes" in (gpu.get("unknown") or {})
    if used is None or unread or gpu.get("processes") or gpu.get("mig") == 1 or used <= policy["memory_held_mib"]:
        return []
    text = f"{label}: {used} MiB of GPU memory in use with no compute process"
    return [_finding(policy, "memory_held", text, g)]


def _compute_mode(gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef, label: str) -> list[Finding]:
    mode = gpu.get("compute_mode")
    if mode == 3:
        text = f"{label}: compute mode EXCLUSIVE_PROCESS (one process per GPU at a time)"
        return [_finding(policy, "compute_exclusive", text, g)]
    if mode == 2:
        return [_finding(policy, "compute_prohibited", f"{label}: compute mode PROHIBITED: no process can use it", g)]
    return []


def _fabric_cliques(gpus: list[dict[str, Any]], policy: dict[str, Any]) -> list[Finding]:
    """GPUs whose fabric completed in another clique than the node's other GPUs."""
    joined = [g for g in gpus if (g.get("fabric") or {}).get("state") == FABRIC_COMPLETED]
    cliques = [g["fabric"].get("clique") for g in joined]
    if len(set(cliques)) < 2:
        return []
    usual = max(set(cliques), key=cliques.count)
    return [
        _finding(
            policy,
            "fabric_not_ready",
            f"{ref(g).label()}: in NVSwitch clique {g['fabric'].get('clique')}, the node's other GPUs in {usual}",
            ref(g),
        )
        for g in joined
        if g["fabric"].get("clique") != usual
    ]


def _pcie(gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef, label: str) -> list[Finding]:
    """Width is judged always; the generation only when read under load (idle links train down)."""
    p = gpu.get("pcie") or {}
    narrow = None not in (p.get("width"), p.get("max_width")) and p["width"] < p["max_width"]
    slow = p.get("under_load") and None not in (p.get("gen"), p.get("max_gen")) and p["gen"] < p["max_gen"]
    if not (narrow or slow):
        return []
    when = "under load" if p.get("under_load") else "(generation not judged: read at idle)"
    return [
        _finding(
            policy,
            "pcie_downgraded",
            f"{label}: PCIe link Gen{p.get('gen')} x{p.get('width')}, below its maximum "
            f"Gen{p.get('max_gen')} x{p.get('max_width')} {when}",
            g,
        )
    ]


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


def xid_findings(
    events: list[tuple[int, int]], gpus: tuple[GpuInfo, ...], policy: dict[str, Any], *, during: str = "the run"
) -> list[Finding]:
    """Pure: one finding per XID event (NVML index, XID), fatal ones with their action."""
    out = []
    by_index = {g.index: g for g in gpus}
    fatal = set(policy["fatal_xids"])
    for index, xid in events:
        g = by_index[index].ref() if index in by_index else GpuRef(index)
        message = f"{g.label()}: XID {xid} during {during}"
        if xid in fatal:
            action = policy["xid_actions"].get(str(xid), "reset-gpu")
            rule = catalogue.rules()["nvml.xid"]
            out.append(
                catalogue.finding(
                    "nvml.xid",
                    message,
                    gpu=g,
                    rule=replace(rule, action=action),
                    xid=xid,
                    action=action.replace("-", " "),
                )
            )
        else:
            other = policy["other_xid"]
            rule = replace(catalogue.rules()["nvml.xid-other"], severity=other["severity"], action=other["action"])
            out.append(catalogue.finding("nvml.xid-other", message, gpu=g, rule=rule))
    return out


def unknown_findings(snap: NvmlSnapshot) -> list[Finding]:
    """One info line per item NVML could not report (NOT_SUPPORTED etc.): unknown, not a failure."""
    items: dict[str, list[str]] = {}
    for gpu in snap.gpus:
        for key, why in gpu.get("unknown", {}).items():
            items.setdefault(f"{key} ({why})", []).append(str(gpu["index"]))
    return [
        catalogue.finding("nvml.unknown", f"unknown on GPU {', '.join(idx)}: {what}") for what, idx in items.items()
    ]


# ---- the part that talks to NVML (runs in the worker) -------------------------------------


def run(ctx: CheckContext) -> CheckResult:
    import os

    from gpuenv.adapters import nvml as adapter
    from gpuenv.verify.procs import own_pids

    policy = load_policy(Path(ctx.policy) if ctx.policy else None)
    problem = adapter.init()
    if problem:
        return _no_nvml(ctx, policy, problem)
    snap = NvmlSnapshot.from_dict(adapter.snapshot())  # idle: processes, width, everything else
    cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = visible(snap.gpus, cuda_visible)
    load_note = read_links_under_load(snap, [g["index"] for g in gpus], gpu_load() if ctx.device == "cuda" else None)
    findings = evaluate(
        snap,
        policy,
        expect_gpus=ctx.expect_gpus,
        cuda_visible=cuda_visible,
        host=ctx.host,
        own_pids=frozenset(own_pids()),
    )
    findings += unknown_findings(snap)
    if load_note:
        findings.append(catalogue.finding("nvml.pcie-not-judged", load_note))
    if ctx.host.pci_reference is None and ctx.host.pci_nvidia:
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
            **per_gpu_figures(snap, gpus),
        },
        findings=findings,
        detail={"snapshot": snap.to_dict()},
    )


def per_gpu_figures(snap: NvmlSnapshot, gpus: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Pure: the figures fleet comparison reads (gpuenv/verify/figures.py), by CUDA index: the
    temperature at the start, and the SM clock under load (absent where no load ran)."""
    by_nvml = {g["index"]: g for g in snap.gpus}
    figures: dict[str, dict[str, int]] = {}
    for metric, key in (("temperature_c", "temperature"), ("sm_clock_mhz", "sm_clock_under_load")):
        values = {str(g["cuda_index"]): by_nvml[g["index"]].get(key) for g in gpus}
        present = {i: int(v) for i, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
        if present:
            figures[metric] = present
    return figures


def _no_nvml(ctx: CheckContext, policy: dict[str, Any], problem: str) -> CheckResult:
    if ctx.expect_gpus:
        message = f"NVML shows no GPU ({problem}); {ctx.expect_gpus} expected"
        return CheckResult("nvml", "fail", summary=message, findings=[_finding(policy, "gpu_missing", message, None)])
    if ctx.device == "cpu":
        return CheckResult("nvml", "skip", summary=f"CPU only: NVML {problem}")
    message = f"NVML cannot start on a GPU node: {problem}"
    return CheckResult("nvml", "fail", summary=message, findings=[init_finding(message, problem)])


def init_finding(message: str, problem: str) -> Finding:
    known = {"driver-not-loaded": "nvml.driver-not-loaded", "library-not-found": "nvml.library-not-found"}
    return catalogue.finding(known.get(problem, "nvml.init-failed"), message)


def read_links_under_load(
    snap: NvmlSnapshot, indices: list[int], load: contextlib.AbstractContextManager[str | None] | None
) -> str | None:
    """Re-read the PCIe generation of these GPUs (NVML index) while `load` keeps them busy,
    polling briefly until each reaches its maximum; marks those readings `under_load`.
    Returns why the generation could not be judged, or None."""
    from gpuenv.adapters import nvml as adapter

    if load is None:
        return "PCIe generation not judged: no GPU load on the CPU path (idle links train down)"
    by_index = {g["index"]: g for g in snap.gpus if g["index"] in indices}
    with load as problem:
        if problem:
            return f"PCIe generation not judged: no GPU load ({problem}); idle links train down"
        deadline = time.monotonic() + LINK_POLL_S
        while True:
            gens = adapter.pcie_generations(list(by_index))
            at_max = all(gen is None or gen >= (by_index[i]["pcie"].get("max_gen") or 0) for i, gen in gens.items())
            if at_max or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        clocks = adapter.sm_clocks(list(by_index))  # busy GPUs run at the clocks their cooling allows
    for i, gen in gens.items():
        by_index[i]["pcie"].update(gen=gen, under_load=gen is not None)
        by_index[i]["sm_clock_under_load"] = clocks.get(i)
    return None


@contextlib.contextmanager
def gpu_load() -> Iterator[str | None]:
    """Every visible GPU busy in a short-lived process (gpuenv.verify.gpuload); yields None once
    the load is confirmed, else why not. The process is gone when the block ends."""
    import os
    import select
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuenv.verify.gpuload", str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], LOAD_READY_S)
        line = proc.stdout.readline().strip() if ready else ""
        if line.startswith("ready"):
            yield None
        else:
            yield line.removeprefix("unavailable ") or f"the load process did not start within {LOAD_READY_S:g} s"
    finally:
        with contextlib.suppress(OSError):
            if proc.stdin:
                proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
