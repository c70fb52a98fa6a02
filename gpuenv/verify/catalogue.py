"""The findings catalogue (gpuenv/data/findings.json): every finding's stable code with its
severity, action and remediation. Checks name a code and say what they saw; the rest comes from here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from gpuenv.resources import data_file
from gpuenv.verify.model import Action, Finding, GpuRef, Severity

SCHEMA = "gpuenv.findings/1"


@dataclass(frozen=True)
class Rule:
    code: str
    severity: Severity
    action: Action
    remediation: str | None
    item: str

    @property
    def check(self) -> str:
        return self.code.split(".", 1)[0]


@lru_cache(maxsize=1)
def rules() -> dict[str, Rule]:
    data = json.loads(data_file("findings.json").read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"findings catalogue: schema must be {SCHEMA!r}")
    return {code: _rule(code, entry) for code, entry in data["findings"].items()}


def _rule(code: str, entry: dict[str, Any]) -> Rule:
    return Rule(
        code, entry["severity"], entry["action"], entry.get("remediation"), entry.get("item", code.split(".", 1)[1])
    )


def finding(
    code: str,
    message: str,
    *,
    gpu: GpuRef | None = None,
    item: str | None = None,
    rule: Rule | None = None,
    **fields: Any,
) -> Finding:
    """The finding `code` names, saying `message`; `fields` fill the remediation's {placeholders},
    `item` names the sub-check where one rule serves several. `rule` replaces the catalogue's
    entry (the nvml policy's overrides). An unknown code raises KeyError."""
    r = rule or rules()[code]
    remediation = r.remediation.format(**fields) if r.remediation and fields else r.remediation
    return Finding(r.severity, message, remediation, r.action, gpu, item or r.item, code)
