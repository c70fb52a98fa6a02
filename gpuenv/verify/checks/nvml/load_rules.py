"""The readings under load and the power limit, judged by the policy: pure, one GPU's reading
(the snapshot's dict, with `under_load` from under_load.py) in, findings out.

Under load, as DCGM's diagnostic judges it: a problem clock-event reason (HW slowdown, HW or SW
thermal slowdown, HW power brake; on AMD, a thermal limit or PROCHOT that AMD SMI's violation
status says is active) asserted in any sample, or a failing violation counter (thermal,
reliability; on AMD the thermal residencies) that grew, fails the GPU; SW power cap (AMD's PPT)
is normal for a busy GPU. An SM clock (AMD: GFX clock) below the policy's fraction of the maximum
with no reason asserted at all warns."""

from __future__ import annotations

from typing import Any

from gpuenv.power.record import AppliedCap
from gpuenv.verify import catalogue
from gpuenv.verify.checks.nvml.policy import rule_finding
from gpuenv.verify.model import Finding, GpuRef


def load_findings(gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef) -> list[Finding]:
    reading = gpu.get("under_load")
    if not reading:
        return []
    label = g.label()
    throttled = _asserted(reading, policy)
    if throttled:
        text = f"{label}: under load, " + "; ".join(throttled)
        return [rule_finding(policy, "throttled_under_load", text, g)]
    return _low_clock(gpu, reading, policy, g)


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


def _low_clock(gpu: dict[str, Any], reading: dict[str, Any], policy: dict[str, Any], g: GpuRef) -> list[Finding]:
    clock, top = reading.get("sm_clock_median"), gpu.get("sm_clock_max")
    if not clock or not top or reading.get("clock_events") or not reading.get("reasons_read"):
        return []
    if clock >= policy["low_clock_fraction"] * top:
        return []
    words = policy["wording"]
    text = (
        f"{g.label()}: {words['clock']} {clock} MHz under load, {clock / top:.0%} of its {top} MHz maximum, "
        f"with no {words['reason']} asserted"
    )
    return [rule_finding(policy, "low_clock_under_load", text, g)]


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
