"""GPU-to-GPU links (NVLink on NVIDIA, XGMI on AMD), judged across the node (pure): a link down
while others of the GPU are up fails; every link inactive fails only where the node should have
links: several GPUs and an NVSwitch fabric, a model whose links are on the board (SXM, OAM: the
`links` of gpu-expectations.json), or the policy's nvlink_bridges_expected. Elsewhere (a lone GPU,
a PCIe card without bridges) the links are absent, not down: one info line."""

from __future__ import annotations

from typing import Any

from gpuenv.verify import catalogue
from gpuenv.verify.checks.nvml.policy import ref, rule_finding
from gpuenv.verify.expectations import load_expectations
from gpuenv.verify.model import Finding

FABRIC_NOT_SUPPORTED = 0
NAMES = {"nvlink": "NVLink", "xgmi": "XGMI"}


def link_findings(gpus: list[dict[str, Any]], policy: dict[str, Any]) -> list[Finding]:
    fabric = any((g.get("fabric") or {}).get("state", FABRIC_NOT_SUPPORTED) != FABRIC_NOT_SUPPORTED for g in gpus)
    findings: list[Finding] = []
    absent: dict[str, list[str]] = {}
    for gpu in gpus:
        links = gpu.get("links")
        if not links or not links["down"]:
            continue
        g, kind = ref(gpu), NAMES[links["kind"]]
        down = ", ".join(str(n) for n in links["down"])
        if links["up"]:
            text = f"{g.label()}: {kind} link(s) {down} down, {len(links['up'])} up"
            findings.append(rule_finding(policy, "nvlink_down", text, g))
            continue
        expected, why = _expected(gpu, len(gpus), fabric, policy)
        if expected:
            text = f"{g.label()}: all {len(links['down'])} {kind} links inactive {why}"
            findings.append(rule_finding(policy, "nvlink_down", text, g))
        else:
            absent.setdefault(f"{kind} absent: every link inactive, {why}", []).append(str(gpu["index"]))
    return findings + [
        catalogue.finding("nvml.nvlink-absent", f"GPU {', '.join(idx)}: {what}") for what, idx in absent.items()
    ]


def _expected(gpu: dict[str, Any], gpus: int, fabric: bool, policy: dict[str, Any]) -> tuple[bool, str]:
    """Whether this GPU should have its links up on this node, and why (or why not)."""
    if gpus < 2:
        return False, "a lone GPU"
    if fabric:
        return True, f"on a node of {gpus} GPUs with an NVSwitch fabric"
    if policy["nvlink_bridges_expected"]:
        return True, f"on a node of {gpus} GPUs where the policy expects bridges (nvlink_bridges_expected)"
    model = load_expectations().model(gpu.get("name") or "")
    wiring = ((model or {}).get("links") or {}).get("wiring")
    if wiring == "board":
        return True, f"on a node of {gpus} {model['model']} (its links are on the board)"  # type: ignore[index]
    if model is None:
        return False, f"{gpu.get('name')} is not in gpu-expectations.json: not judged"
    return False, f"{model['model']}: a card whose links need a bridge, and none is expected"
