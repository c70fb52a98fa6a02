"""The NVML snapshot judged by the policy: pure, a snapshot (gpuenv.adapters.nvml.snapshot) and the
policy in, findings out. Every finding names the GPU (index, UUID, PCI bus id), and each GPU is
judged as its own model (a node may mix them). What could not be read is judged by its class
(unread.py), links across the node (links.py), clocks under load against the GPU's peers
(load_rules.py), events by the vendors' catalogues (events.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuenv.platforms import nodes
from gpuenv.power.record import AppliedCap
from gpuenv.verify import catalogue
from gpuenv.verify.checks.nvml.c2c import c2c_findings
from gpuenv.verify.checks.nvml.events import ras_findings
from gpuenv.verify.checks.nvml.links import link_findings
from gpuenv.verify.checks.nvml.load_rules import configured_findings, load_findings, peer_findings, power_findings
from gpuenv.verify.checks.nvml.policy import ref, rule_code, rule_finding
from gpuenv.verify.checks.nvml.unread import unread_findings
from gpuenv.verify.context import CheckContext
from gpuenv.verify.facts import HostFacts, NvmlSnapshot, visible
from gpuenv.verify.model import Finding, GpuRef
from gpuenv.verify.pci import same_bus

FABRIC_NOT_SUPPORTED, FABRIC_COMPLETED = 0, 3


def evaluate(
    snap: NvmlSnapshot,
    policy: dict[str, Any],
    *,
    expect_gpus: int | None,
    cuda_visible: str | None,
    host: HostFacts,
    own_pids: frozenset[int] = frozenset(),
    applied: list[AppliedCap] | None = None,
) -> list[Finding]:
    """Pure: the snapshot judged by the policy. `own_pids` are the run's own processes (never
    leftovers); `host.pci_reference` the bus ids NVML must see (None: not judged here); `applied`
    the power caps `gpuenv tune power` recorded."""
    gpus = visible(snap.gpus, cuda_visible)
    findings = _count_findings(snap, gpus, policy, expect_gpus, host)
    for gpu in gpus:
        findings += gpu_findings(gpu, policy, own_pids=own_pids, applied=applied)
    findings += _fabric_cliques(gpus, policy) + link_findings(gpus, policy) + peer_findings(gpus, policy)
    return findings + _mixed(gpus)


def judged(
    snap: NvmlSnapshot,
    policy: dict[str, Any],
    ctx: CheckContext,
    *,
    visible_spec: str | None,
    own_pids: frozenset[int],
    applied: list[AppliedCap] | None,
    init_s: float | None = None,
) -> list[Finding]:
    """Pure: what the nvml check finds in a snapshot, NVIDIA's or AMD's: the policy's findings for
    the GPUs `visible_spec` leaves visible, then what the library could not read, by its class.
    `init_s`: how long the library's first start on this node took in this run (None: not timed)."""
    findings = evaluate(
        snap,
        policy,
        expect_gpus=ctx.expect_gpus,
        cuda_visible=visible_spec,
        host=ctx.host,
        own_pids=own_pids,
        applied=applied,
    )
    gpus = visible(snap.gpus, visible_spec)
    return slow_start(findings, init_s, policy) + unread_findings(snap, gpus, policy, ctx.host.smi)


def slow_start(findings: list[Finding], init_s: float | None, policy: dict[str, Any]) -> list[Finding]:
    """Pure: with persistence mode off, the time NVML took to start (slow_init_s or more) added to
    each persistence_off finding: what every job on the node pays on its first NVML or CUDA call."""
    if init_s is None or init_s < policy["slow_init_s"]:
        return findings
    cost = f"; NVML took {init_s:.1f} s to start (the driver sets the GPUs up on each first use)"
    return [replace(f, message=f.message + cost) if f.code == rule_code("persistence_off") else f for f in findings]


def _count_findings(
    snap: NvmlSnapshot,
    gpus: list[dict[str, Any]],
    policy: dict[str, Any],
    expect_gpus: int | None,
    host: HostFacts,
) -> list[Finding]:
    findings = []
    node = nodes.for_smi(host.smi)
    smi, vendor = node.library, node.vendor
    if expect_gpus is not None and len(gpus) < expect_gpus:
        findings.append(
            rule_finding(
                policy,
                "gpu_missing",
                f"{smi} shows {len(gpus)} GPU(s) visible to this process, {expect_gpus} expected",
                None,
            )
        )
    seen = [g.get("pci_bus_id") for g in snap.gpus]
    for bus in host.pci_reference or ():
        if not any(same_bus(bus, other) for other in seen):
            findings.append(
                rule_finding(
                    policy,
                    "gpu_missing",
                    f"{vendor} GPU at PCI {bus} is on the bus but {smi} cannot see it (fallen off the bus)",
                    GpuRef(-1, None, bus),
                )
            )
    return findings


def gpu_findings(
    gpu: dict[str, Any],
    policy: dict[str, Any],
    *,
    own_pids: frozenset[int] = frozenset(),
    applied: list[AppliedCap] | None = None,
) -> list[Finding]:
    g = ref(gpu)
    label = g.label()
    out: list[Finding] = []
    if gpu.get("ecc_uncorrected"):
        out.append(
            rule_finding(
                policy,
                "ecc_uncorrected",
                f"{label}: {gpu['ecc_uncorrected']} uncorrectable ECC error(s) since the driver loaded",
                g,
            )
        )
    if gpu.get("retired_pages_pending"):
        out.append(rule_finding(policy, "retired_pages_pending", f"{label}: retired pages pending", g))
    if gpu.get("bad_pages_unreservable"):
        text = f"{label}: {gpu['bad_pages_unreservable']} bad memory page(s) that cannot be retired"
        out.append(rule_finding(policy, "bad_pages_unreservable", text, g))
    rows = gpu.get("remapped_rows") or {}
    if rows.get("pending"):
        out.append(rule_finding(policy, "remapped_rows_pending", f"{label}: row remapping pending", g))
    if rows.get("failure"):
        out.append(rule_finding(policy, "remapped_rows_failure", f"{label}: row remapping failed", g))
    out += ras_findings(gpu, policy, g) if any((gpu.get("ras") or {}).values()) else []
    out += _pcie(gpu, policy, g, label) + _clocks(gpu, policy, g, label) + configured_findings(gpu, policy, g)
    if gpu.get("persistence") == 0:
        out.append(rule_finding(policy, "persistence_off", f"{label}: persistence mode is off", g))
    out += _thermal(gpu, policy, g, label)
    out += load_findings(gpu, policy, g) + power_findings(gpu, policy, g, applied)
    leftovers = [p for p in gpu.get("processes") or [] if p not in own_pids]
    if leftovers:
        pids = ", ".join(str(p) for p in leftovers)
        out.append(rule_finding(policy, "leftover_processes", f"{label}: compute processes still running: {pids}", g))
    out += _memory_held(gpu, policy, g, label)
    if gpu.get("mig") == 1:
        out.append(rule_finding(policy, "mig_enabled", f"{label}: MIG mode enabled", g))
    out += _compute_mode(gpu, policy, g, label) + c2c_findings(gpu, policy)
    fabric = gpu.get("fabric")
    if (
        fabric
        and fabric["state"] != FABRIC_NOT_SUPPORTED
        and (fabric["state"] != FABRIC_COMPLETED or fabric["status"] != 0)
    ):
        states = {1: "not started", 2: "in progress", 3: "completed"}
        out.append(
            rule_finding(
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
    unread = "processes" in (gpu.get("unread") or {})
    if used is None or unread or gpu.get("processes") or gpu.get("mig") == 1 or used <= policy["memory_held_mib"]:
        return []
    text = f"{label}: {used} MiB of GPU memory in use with no compute process"
    return [rule_finding(policy, "memory_held", text, g)]


def _compute_mode(gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef, label: str) -> list[Finding]:
    mode = gpu.get("compute_mode")
    if mode == 3:
        text = f"{label}: compute mode EXCLUSIVE_PROCESS (one process per GPU at a time)"
        return [rule_finding(policy, "compute_exclusive", text, g)]
    if mode == 2:
        return [
            rule_finding(policy, "compute_prohibited", f"{label}: compute mode PROHIBITED: no process can use it", g)
        ]
    return []


def _fabric_cliques(gpus: list[dict[str, Any]], policy: dict[str, Any]) -> list[Finding]:
    """GPUs whose fabric completed in another clique than the node's other GPUs."""
    joined = [g for g in gpus if (g.get("fabric") or {}).get("state") == FABRIC_COMPLETED]
    cliques = [g["fabric"].get("clique") for g in joined]
    if len(set(cliques)) < 2:
        return []
    usual = max(set(cliques), key=cliques.count)
    return [
        rule_finding(
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
        rule_finding(
            policy,
            "pcie_downgraded",
            f"{label}: PCIe link Gen{p.get('gen')} x{p.get('width')}, below its maximum "
            f"Gen{p.get('max_gen')} x{p.get('max_width')} {when}",
            g,
        )
    ]


def _clocks(gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef, label: str) -> list[Finding]:
    """Clocks held down: NVML's clock-event reasons (the policy's problem bits), or the thermal
    limits AMD SMI's violation status says are active."""
    limits = gpu.get("thermal_limits")
    if limits:
        return [rule_finding(policy, "clock_slowdown", f"{label}: clocks held down by {', '.join(limits)}", g)]
    reasons = gpu.get("clock_events")
    if not reasons:
        return []
    named = [name for bit, name in policy["problem_clock_events"].items() if reasons & int(bit, 16)]
    if not named:
        return []
    return [
        rule_finding(
            policy, "clock_slowdown", f"{label}: clocks held down by {', '.join(named)} (reasons 0x{reasons:x})", g
        )
    ]


def _thermal(gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef, label: str) -> list[Finding]:
    """The GPU's (AMD: hotspot) and memory temperature within the margin of their limits, at idle
    and, with the same margin, at their hottest under load."""
    under = gpu.get("under_load") or {}
    out = []
    for sensor in ("", "memory_"):  # temperature, slowdown_temperature; memory_temperature, ...
        limit = gpu.get(f"{sensor}slowdown_temperature")
        for temp, when in (
            (gpu.get(f"{sensor}temperature"), ""),
            (under.get(f"{sensor}temperature_max"), " under load"),
        ):
            if temp is not None and limit and temp >= limit - policy["temperature_margin_c"]:
                what, limit_is = ("memory at ", "its limit") if sensor else ("", policy["wording"]["limit"])
                text = f"{label}: {what}{temp} °C{when}, {limit_is} at {limit} °C"
                out.append(rule_finding(policy, "temperature", text, g))
                break  # one finding a sensor: the idle reading, else the hottest under load
    return out


def _mixed(gpus: list[dict[str, Any]]) -> list[Finding]:
    """A node of several models (each GPU is judged as its own): said, once."""
    models: dict[str, list[str]] = {}
    for gpu in gpus:
        if gpu.get("name"):  # a GPU that could not be named is judged by what could not be read
            models.setdefault(gpu["name"], []).append(str(gpu["index"]))
    if len(models) < 2:
        return []
    said = "; ".join(f"{name}: GPU {', '.join(idx)}" for name, idx in models.items())
    return [catalogue.finding("nvml.mixed-models", f"GPUs of {len(models)} models, each judged as its own: {said}")]


def init_finding(message: str, problem: str) -> Finding:
    known = {"driver-not-loaded": "nvml.driver-not-loaded", "library-not-found": "nvml.library-not-found"}
    return catalogue.finding(known.get(problem, "nvml.init-failed"), message)
