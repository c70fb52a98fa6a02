"""The report model of `gpuenv verify`: findings, check results, the verdict (pure, no I/O).

A failed check is data (findings with a severity and a remediation), never an exception. The
verdict and the exit code are decided here, in one place.
"""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

# Levels, device choices and statuses live in gpuenv.types; re-exported for verify's modules.
from gpuenv.types import DEVICE_CHOICES as DEVICE_CHOICES
from gpuenv.types import LEVELS as LEVELS
from gpuenv.types import STATUSES as STATUSES
from gpuenv.types import Device as Device
from gpuenv.types import DeviceChoice as DeviceChoice
from gpuenv.types import Level as Level
from gpuenv.types import Status as Status

SCHEMA = "gpuenv.verify-report/2"
READABLE_SCHEMAS = ("gpuenv.verify-report/1", SCHEMA)  # what readers of reports accept
# The GPU health check, by the name reports (schema /2), the worker and `--check` have always given it: the
# check reads NVML or AMD SMI alike; users may call it "health" (gpuenv.verify.registry.ALIASES).
HEALTH = "nvml"

Severity = Literal["info", "warn", "fail"]
# What an operator should do about a finding (DCGM-like: monitor / reset / isolate ...).
Action = Literal[
    "none",
    "monitor",
    "fix-config",
    "reinstall-stack",
    "reinstall-driver",
    "reset-gpu",
    "reboot",
    "drain",
    "rma",
]
NOT_CERTIFIED: frozenset[str] = frozenset({"fail", "timeout", "crash"})


@dataclass(frozen=True)
class GpuRef:
    """Which GPU a finding is about: its index as this process sees it, UUID and PCI bus id."""

    index: int
    uuid: str | None = None
    pci_bus_id: str | None = None

    def label(self) -> str:
        parts = [f"GPU {self.index}"]
        if self.uuid:
            parts.append(self.uuid)
        if self.pci_bus_id:
            parts.append(self.pci_bus_id)
        return " ".join(parts[:1]) + (f" ({', '.join(parts[1:])})" if parts[1:] else "")


@dataclass(frozen=True)
class Finding:
    severity: Severity
    message: str
    remediation: str | None = None
    action: Action = "none"
    gpu: GpuRef | None = None
    item: str | None = None  # the sub-check it comes from, e.g. "ecc", "pcie", "fp16-gradscaler"
    code: str | None = None  # stable `<check>.<rule>` from the findings catalogue

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpu"] = asdict(self.gpu) if self.gpu else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        gpu = data.get("gpu")
        return cls(
            severity=data["severity"],
            message=data["message"],
            remediation=data.get("remediation"),
            action=data.get("action", "none"),
            gpu=GpuRef(**gpu) if gpu else None,
            item=data.get("item"),
            code=data.get("code"),
        )


def readable(data: object) -> bool:
    """Whether a parsed report is one this gpuenv can read (schema /1 or /2)."""
    return isinstance(data, dict) and data.get("schema") in READABLE_SCHEMAS


@dataclass
class CheckResult:
    name: str
    status: Status
    duration_s: float = 0.0
    summary: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)  # signal, stderr tail, skipped items
    # A site check's figures, as it declared them: {metric: {"unit", "better", "per_gpu"}} (gpuenv's
    # own are registered in gpuenv/verify/figures.py instead)
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = {
            "name": self.name,
            "status": self.status,
            "duration_s": round(self.duration_s, 3),
            "summary": self.summary,
            "metrics": self.metrics,
            "findings": [f.to_dict() for f in self.findings],
            "artifacts": self.artifacts,
            "detail": self.detail,
        }
        return {**data, "figures": self.figures} if self.figures else data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        return cls(
            name=data["name"],
            status=data["status"],
            duration_s=float(data.get("duration_s", 0.0)),
            summary=data.get("summary", ""),
            metrics=dict(data.get("metrics", {})),
            findings=[Finding.from_dict(f) for f in data.get("findings", [])],
            artifacts=list(data.get("artifacts", [])),
            detail=dict(data.get("detail", {})),
            figures=dict(data.get("figures", {})),
        )


def died(check: str, code: int | None, seconds: float, stderr_tail: str) -> CheckResult:
    """The result of a check whose process ended without an answer: a crash naming its signal (or exit
    code). SIGKILL cannot come from the check itself: the kernel's OOM killer, a job's limit, a person."""
    sig = signal.Signals(-code).name if code is not None and code < 0 else None
    summary = f"{check} crashed: its process died by {sig}" if sig else f"{check} crashed: its process exited {code}"
    if sig == "SIGKILL":
        summary += " (sent from outside the check: the kernel's OOM killer (see dmesg), a job limit or a person)"
    return CheckResult(
        check, "crash", seconds, summary=summary, detail={"signal": sig, "exit_code": code, "stderr_tail": stderr_tail}
    )


def status_from_findings(findings: list[Finding]) -> Status:
    """fail if any finding fails, warn if any warns, else pass."""
    severities = {f.severity for f in findings}
    if "fail" in severities:
        return "fail"
    if "warn" in severities:
        return "warn"
    return "pass"


def summarize(findings: list[Finding], default: str) -> str:
    """The first failing, else the first warning message; else the default line."""
    for severity in ("fail", "warn"):
        for finding in findings:
            if finding.severity == severity:
                return finding.message
    return default


@dataclass(frozen=True)
class Verdict:
    certified: bool
    outcome: Literal["certified", "not certified", "could not run", "interrupted"]
    exit_code: int
    summary: str


def decide(checks: list[CheckResult], *, strict: bool, cpu_only: bool, interrupted: str | None) -> Verdict:
    """The verdict and exit code: 0 certified, 1 not certified, 3 gpuenv could not run."""
    counts = {s: sum(1 for c in checks if c.status == s) for s in STATUSES}
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    scope = " (CPU only)" if cpu_only else ""
    bad = [c.name for c in checks if c.status in NOT_CERTIFIED]
    if interrupted:
        return Verdict(False, "interrupted", 3, f"interrupted by {interrupted}; partial: {tally}")
    if bad:
        return Verdict(False, "not certified", 1, f"not certified{scope}: {', '.join(bad)} ({tally})")
    errors = [c.name for c in checks if c.status == "error"]
    if errors:
        return Verdict(False, "could not run", 3, f"could not run: {', '.join(errors)} ({tally})")
    warned = [c.name for c in checks if c.status == "warn"]
    if strict and warned:
        return Verdict(
            False, "not certified", 1, f"not certified (--strict){scope}: {', '.join(warned)} warned ({tally})"
        )
    if not checks or all(c.status == "skip" for c in checks):
        return Verdict(False, "could not run", 3, f"no check could run{scope} ({tally or 'none selected'})")
    return Verdict(True, "certified", 0, f"certified{scope} ({tally})")


@dataclass
class Report:
    level: str
    device: str  # "cuda" | "cpu"
    cpu_only: bool
    started: str
    finished: str
    gpuenv_version: str
    host: dict[str, Any]
    stack: dict[str, Any]
    checks: list[CheckResult]
    verdict: Verdict
    partial: bool = False
    interrupted: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase of the run
    multi_node: dict[str, Any] | None = None  # a run across nodes: placement, figures, who hung
    cost: dict[str, Any] | None = None  # with a price only (gpuenv/verify/cost.py)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": SCHEMA,
            "gpuenv_version": self.gpuenv_version,
            "level": self.level,
            "device": self.device,
            "cpu_only": self.cpu_only,
            "started": self.started,
            "finished": self.finished,
            "partial": self.partial,
            "interrupted": self.interrupted,
            "options": self.options,
            "host": self.host,
            "stack": self.stack,
            "checks": [c.to_dict() for c in self.checks],
            "verdict": asdict(self.verdict),
            "timings": self.timings,
        }
        optional = {"multi_node": self.multi_node, "cost": self.cost}
        data.update({k: v for k, v in optional.items() if v is not None})
        return data
