"""The Grace-GPU C2C link (GH200, GB200), judged per GPU (pure): an inactive link fails; fewer or slower
links than the model's figure (gpu-expectations.json `c2c`, an estimate) warn; back-to-back replays warn;
a GPU whose model has C2C but whose link could not be read warns ("not read"), and a GPU without C2C is
said to have none read, never judged healthy by it."""

from __future__ import annotations

from typing import Any

from gpuenv.verify.checks.nvml.policy import ref, rule_finding
from gpuenv.verify.expectations import load_expectations
from gpuenv.verify.model import Finding


def c2c_findings(gpu: dict[str, Any], policy: dict[str, Any]) -> list[Finding]:
    c2c = gpu.get("c2c")
    if c2c is None:  # a snapshot that never asked (AMD's library, an older report)
        return []
    g = ref(gpu)
    model = load_expectations().model(gpu.get("name") or "") or {}
    expected = model.get("c2c")
    links = c2c.get("links")
    if links is None:
        if expected is None:
            return []
        text = f"{g.label()}: C2C link not read ({c2c.get('not_read')}); a {model['model']} has {expected['links']}"
        return [rule_finding(policy, "c2c_unread", text, g)]
    down = [str(i) for i, link in enumerate(links) if not link["active"]]
    out = []
    if down:
        text = f"{g.label()}: C2C link(s) {', '.join(down)} inactive, {len(links) - len(down)} of {len(links)} active"
        out.append(rule_finding(policy, "c2c_down", text, g))
    replays = sum(link["replay_b2b"] or 0 for link in links)
    if replays:
        out.append(rule_finding(policy, "c2c_replay", f"{g.label()}: {replays} C2C back-to-back replay error(s)", g))
    if expected is not None:
        out += _below_expected(g, links, expected, model["model"], policy)
    return out


def _below_expected(
    g: Any, links: list[dict[str, Any]], expected: dict[str, Any], model: str, policy: dict[str, Any]
) -> list[Finding]:
    """Fewer links, or a slower active one, than the model's figure: an estimate, so a warning."""
    slow = [link["mbps"] for link in links if link["active"] and (link["mbps"] or 0) < expected["mbps"]]
    if len(links) >= expected["links"] and not slow:
        return []
    said = f"{len(links)} link(s)" + (f", {len(slow)} below {expected['mbps']} MB/s" if slow else "")
    text = f"{g.label()}: C2C {said}; a {model} has {expected['links']} of {expected['mbps']} MB/s (estimate)"
    return [rule_finding(policy, "c2c_slow", text, g)]
