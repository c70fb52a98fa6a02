"""The NVML policy: the shipped file and the catalogue's nvml.* rules, with a user's file laid over
them; every nvml.RULE finding takes its severity, action and remediation from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuenv.errors import BadRequest
from gpuenv.platforms import nodes
from gpuenv.resources import data_file
from gpuenv.schema import load as load_data_file
from gpuenv.verify import catalogue
from gpuenv.verify.model import HEALTH, Finding, GpuRef

POLICY_SCHEMA = "gpuenv.nvml-policy/1"


def load_policy(path: Path | None = None, *, smi: str = "nvml") -> dict[str, Any]:
    """The shipped policy and the catalogue's nvml.* rules (on AMD, with the remediations, the
    limits and counters judged under load and the wording of amdsmi-policy.json), with a user's
    file laid over them (rules merge one by one, load_sampling level by level, every other key
    replaces the shipped one)."""
    policy: dict[str, Any] = json.loads(data_file("nvml-policy.json").read_text())
    policy["rules"] = {
        r.code.split(".", 1)[1]: {"severity": r.severity, "action": r.action, "remediation": r.remediation}
        for r in catalogue.rules().values()
        if r.check == HEALTH
    }
    policy["wording"] = {"clock": "SM clock", "reason": "clock-event reason", "limit": "slowdown"}
    overlay = nodes.for_smi(smi).policy_overlay
    if overlay:
        own = json.loads(data_file(overlay).read_text())
        for name, remediation in own["remediations"].items():
            policy["rules"][name]["remediation"] = remediation
        policy.update(own["under_load"])  # the library's limits and counters by their names
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
    for key, value in user.items():
        if key == "load_sampling":
            policy[key] = {**policy[key], **value}
        elif key not in ("schema", "about", "rules"):
            policy[key] = value  # the schema lets through only the shipped keys
    return policy


def ref(gpu: dict[str, Any]) -> GpuRef:
    """The GPU a reading (one of the snapshot's GPU dicts) is about."""
    return GpuRef(gpu["index"], gpu.get("uuid"), gpu.get("pci_bus_id"))


def rule_code(rule: str) -> str:
    """The finding code of a health rule ("persistence_off" is nvml.persistence_off: the report's wire name)."""
    return f"{HEALTH}.{rule}"


def rule_finding(policy: dict[str, Any], rule: str, message: str, gpu: GpuRef | None, **fields: Any) -> Finding:
    """The nvml.RULE finding, with the policy's severity, action and remediation for it."""
    r = policy["rules"][rule]
    code = rule_code(rule)
    entry = catalogue.Rule(
        code, r["severity"], r.get("action", "none"), r.get("remediation"), catalogue.rules()[code].item
    )
    return catalogue.finding(code, message, gpu=gpu, rule=entry, **fields)
