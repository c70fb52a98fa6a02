"""The provisioning plan as text: per group of hosts with the same facts and stack, what they get. Pure."""

from __future__ import annotations

import json
from typing import Any

from gpuenv.platforms.registry import for_stack, stack_from_dict


def stack_label(stack: dict[str, Any] | None) -> str:
    """'torch 2.13.0+cpu py3.11 debian12' for tables; '-' for a host without a stack."""
    if not stack:
        return "-"
    return f"torch {stack['torch']}+{stack['build']} py{stack['python']} {stack['os']}"


def facts_line(facts: dict[str, Any]) -> str:
    gpus: dict[str, int] = {}
    for g in facts["gpus"]:
        gpus[g["label"]] = gpus.get(g["label"], 0) + 1
    gpu = ", ".join(f"{n}× {label}" for label, n in gpus.items()) or "no NVIDIA GPU"
    headers = "headers present" if facts["kernel_headers"] else "headers missing"
    return (
        f"{facts['os']} {facts['architecture']}, kernel {facts['kernel']} ({headers}); {gpu}; "
        f"driver loaded: {facts['driver'] or facts.get('amdgpu') or 'none'}; Secure Boot {facts['secure_boot']}; "
        f"{facts['free_gb']} GiB free; Python {', '.join(facts['pythons']) or 'none'}"
    )


def _stack_line(stack: dict[str, Any]) -> str:
    source = stack["python_source"]["via"]
    software = for_stack(stack_from_dict(stack)).resolver.software(stack_from_dict(stack))
    vision = f", torchvision {stack['torchvision']}" if stack.get("torchvision") else ""
    return f"torch {stack['torch']}+{stack['build']}{vision} ({software}), Python {stack['python']} via {source}"


def plan_lines(rows: list[dict[str, Any]], notes: tuple[str, ...] | list[str]) -> list[str]:
    """What the plan says, hosts with identical facts and stack grouped."""
    planned = [r for r in rows if r.get("facts") is not None]
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in planned:
        key = json.dumps([facts_line(row["facts"]), row["stack"], row["refused"], row["driver"], row["warnings"]])
        groups.setdefault(key, []).append(row)
    stacks = {json.dumps(r["stack"], sort_keys=True) for r in planned if r["stack"]}
    refused = sum(1 for r in planned if r["refused"])
    lines = [f"plan: {len(planned)} host(s), {len(stacks)} stack(s), {refused} refused"]
    lines += [f"  note: {n}" for n in notes]
    for members in groups.values():
        first = members[0]
        lines.append(f"{', '.join(r['host'] for r in members)}: {facts_line(first['facts'])}")
        if first["refused"]:
            lines.append(f"  refused: {first['refused']}")
            continue
        lines.append(f"  stack:  {_stack_line(first['stack'])}")
        lines.append(f"  driver: {first['driver'] or '-'}")
        lines += [f"  warning: {w}" for w in first["warnings"]]
    lines += [
        f"{r['host']}: not planned: {r['status']} ({r['message'] or 'no facts'})"
        for r in rows
        if r.get("facts") is None
    ]
    return lines
