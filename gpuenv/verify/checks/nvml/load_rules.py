"""The readings under load and the power limit, judged by the policy: pure, one GPU's reading
(the snapshot's dict, with `under_load` from under_load.py) in, findings out; and the node's GPUs
judged against each other.

Under load, as DCGM's diagnostic judges it: a problem clock-event reason (HW slowdown, HW or SW
thermal slowdown, HW power brake; on AMD, a thermal limit or PROCHOT that AMD SMI's violation
status says is active) asserted in any sample, or a failing violation counter (thermal,
reliability; on AMD the thermal residencies) that grew, fails the GPU. The rules below read the
causes both vendors' readings share (idle, configured, power_cap...), and no benign or configured
cause mutes them: an SM clock (AMD: GFX clock) below the policy's fraction of its maximum warns;
a GPU idle in most samples while the load ran, or one the load process did not run on, warns; a
clock held by configured limits (application clocks, AMD's host limit) warns
naming them; a GPU whose clock is far below its peers of the same model under the same causes
warns; a GPU or memory temperature within the margin of its limit warns, as at idle."""

from __future__ import annotations

from typing import Any

from gpuenv.power.record import AppliedCap
from gpuenv.verify import catalogue
from gpuenv.verify.checks.nvml.policy import ref, rule_finding
from gpuenv.verify.checks.nvml.under_load import median
from gpuenv.verify.model import Finding, GpuRef


def load_findings(gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef) -> list[Finding]:
    reading = gpu.get("under_load")
    if not reading:
        return []
    label = g.label()
    throttled = _asserted(reading, policy)
    if throttled:
        text = f"{label}: under load, " + "; ".join(throttled)
        found = [rule_finding(policy, "throttled_under_load", text, g)]
    else:
        found = _low_clock(gpu, reading, policy, g)
    return found + _idle(gpu, reading, policy, g) + _not_read(reading, policy, g)


def _asserted(reading: dict[str, Any], policy: dict[str, Any]) -> list[str]:
    """Each problem reason asserted in a sample, with its share of the sampled time, and each
    failing violation counter that grew, with the time it counted."""
    samples = max(1, int(reading.get("reasons_read") or 0))
    sampled_s = float(reading.get("sampled_s") or 0.0)
    seen = reading.get("clock_events") or {}
    found = []
    for bit, name in policy["problem_clock_events"].items():
        hits = seen.get(_reason_key(bit), 0)
        if hits:
            found.append(f"{name} asserted in {hits} of {samples} samples (~{hits / samples * sampled_s:.1f} s)")
    grown = reading.get("violation_s") or {}
    for counter, name in policy["failing_violations"].items():
        seconds = grown.get(counter) or 0.0
        if seconds > policy["violation_min_s"]:
            found.append(f"{name} violation counter grew by {seconds:.2f} s")
    return found


def _reason_key(name: str) -> str:
    """A policy's reason as the reading keys it: NVML's bit normalised ("0x08" is "0x8"), AMD
    SMI's limit by its name."""
    return f"0x{int(name, 16):x}" if name.lower().startswith("0x") else name


def _causes(reading: dict[str, Any]) -> str:
    """The causes the samples asserted, with how many samples each ("power_cap in 5 of 5")."""
    samples = max(1, int(reading.get("reasons_read") or 0))
    causes = reading.get("causes") or {}
    return ", ".join(f"{c} in {n} of {samples} samples" for c, n in sorted(causes.items()))


def _low_clock(gpu: dict[str, Any], reading: dict[str, Any], policy: dict[str, Any], g: GpuRef) -> list[Finding]:
    clock, top = reading.get("sm_clock_median"), gpu.get("sm_clock_max")
    if not clock or not top or clock >= policy["low_clock_fraction"] * top:
        return []
    words = policy["wording"]
    if not reading.get("reasons_read"):
        why = f"its {words['reason']}s not read"
    else:
        why = f"with {_causes(reading)}" if reading.get("causes") else f"with no {words['reason']} asserted"
    text = f"{g.label()}: {words['clock']} {clock} MHz under load, {clock / top:.0%} of its {top} MHz maximum, {why}"
    return [rule_finding(policy, "low_clock_under_load", text, g)]


def _idle(gpu: dict[str, Any], reading: dict[str, Any], policy: dict[str, Any], g: GpuRef) -> list[Finding]:
    """The GPU took no work while the load ran: idle in most samples, or not among the GPUs the
    load process says it runs on."""
    samples = int(reading.get("reasons_read") or 0)
    idle = (reading.get("causes") or {}).get("idle", 0)
    said = []
    if samples and idle > policy["idle_share_under_load"] * samples:
        said.append(f"idle in {idle} of {samples} samples while the load ran")
    if gpu.get("loaded") is False:
        said.append("the load process does not run on it")
    if not said:
        return []
    text = f"{g.label()}: {'; '.join(said)}: it took no work, or gpuenv sampled another GPU than it loaded"
    return [rule_finding(policy, "idle_under_load", text, g)]


def _not_read(reading: dict[str, Any], policy: dict[str, Any], g: GpuRef) -> list[Finding]:
    """A GPU with no reading under load while the load ran is not judged, so not passed."""
    if not reading.get("samples") or reading.get("reasons_read") or reading.get("sm_clock_median") is not None:
        return []
    text = f"{g.label()}: neither its clock nor its clock-limit reasons could be read under load"
    return [rule_finding(policy, "not_read_under_load", text, g)]


def configured_findings(gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef) -> list[Finding]:
    """Clocks held by configured limits: application clocks below their default, and, under load,
    the configured cause (NVML's reason 0x2, AMD's GFX clock below the host's limit) asserted."""
    said = []
    app, default = gpu.get("app_clock"), gpu.get("app_clock_default")
    if app and default and app < default:
        said.append(f"SM application clock set to {app} MHz (default {default} MHz)")
    reading = gpu.get("under_load") or {}
    hits = (reading.get("causes") or {}).get("configured", 0)
    if hits:
        said.append(f"a configured clock limit asserted in {hits} of {reading.get('reasons_read')} samples under load")
    if not said:
        return []
    return [rule_finding(policy, "clocks_configured", f"{g.label()}: clocks held by {'; '.join(said)}", g)]


def peer_findings(gpus: list[dict[str, Any]], policy: dict[str, Any]) -> list[Finding]:
    """Each GPU's clock under load against the median of the node's GPUs of the same model under
    the same causes (those asserted in at least half its samples); groups smaller than
    peers_min_gpus are not compared (info)."""
    groups: dict[tuple[str, tuple[str, ...]], list[dict[str, Any]]] = {}
    for gpu in gpus:
        reading = gpu.get("under_load") or {}
        if reading.get("sm_clock_median") is None:
            continue
        half = max(1, int(reading.get("reasons_read") or 0)) / 2
        causes = tuple(sorted(c for c, n in (reading.get("causes") or {}).items() if n >= half))
        groups.setdefault((gpu.get("name") or "?", causes), []).append(gpu)
    found, alone = [], []
    for (model, causes), members in groups.items():
        under = ", ".join(causes) or "no cause"
        if len(members) < policy["peers_min_gpus"]:
            alone.append(f"GPU {', '.join(str(m['index']) for m in members)} ({model} under {under})")
            continue
        middle = median([m["under_load"]["sm_clock_median"] for m in members])
        found += [_below(m, middle, len(members), model, under, policy) for m in members if _slow(m, middle, policy)]
    if alone:
        text = f"clocks under load not compared with peers (fewer than {policy['peers_min_gpus']}): {'; '.join(alone)}"
        found.append(catalogue.finding("nvml.peers-not-compared", text))
    return found


def _slow(gpu: dict[str, Any], middle: float, policy: dict[str, Any]) -> bool:
    return bool(gpu["under_load"]["sm_clock_median"] < policy["peer_clock_below_median"] * middle)


def _below(gpu: dict[str, Any], middle: float, peers: int, model: str, under: str, policy: dict[str, Any]) -> Finding:
    g, clock = ref(gpu), gpu["under_load"]["sm_clock_median"]
    text = (
        f"{g.label()}: {policy['wording']['clock']} {clock} MHz under load, {clock / middle:.0%} of the "
        f"{middle:g} MHz median of the node's {peers} {model} under {under}"
    )
    return rule_finding(policy, "clock_below_peers", text, g)


def power_findings(
    gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef, applied: list[AppliedCap] | None
) -> list[Finding]:
    """The enforced power limit below the default: a warning, or info when `gpuenv tune power`
    recorded that it applied this very cap to this GPU."""
    power = gpu.get("power") or {}
    enforced, default = power.get("enforced_mw"), power.get("default_mw")
    tolerance = policy["power_cap_tolerance_w"] * 1000
    if not enforced or not default or enforced >= default - tolerance:
        return []
    text = f"{g.label()}: power limit {enforced / 1000:g} W enforced, below its default {default / 1000:g} W"
    if _tuned(gpu, enforced, tolerance, applied or []):
        return [catalogue.finding("nvml.power-cap-applied", f"{text}, applied by gpuenv tune power", gpu=g)]
    return [rule_finding(policy, "power_capped", text, g)]


def _tuned(gpu: dict[str, Any], enforced: int, tolerance: float, applied: list[AppliedCap]) -> bool:
    for cap in applied:
        same = cap.uuid == gpu.get("uuid") if cap.uuid and gpu.get("uuid") else cap.index == gpu.get("index")
        if same and abs(cap.applied_mw - enforced) <= tolerance:
            return True
    return False
