"""What ansible-runner's events mean: per-host progress and the run's summary. Pure, no I/O.

`progress_from_event` turns one event into a line of progress (`ProgressBoard` keeps the live
view's rows); `HostTally` accumulates what the events say about each host into `HostSummary`s,
with the facts and driver plans the plays hand back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Progress:
    host: str
    task: str
    status: str  # ok | changed | failed | ignored | skipped | unreachable | started
    result: dict[str, Any] | None = field(default=None, compare=False, repr=False)  # the task's, once it ended


def progress_from_event(event: dict[str, Any]) -> Progress | None:
    """One line of progress from a runner event, or None for events that are not about a host."""
    kind = event.get("event", "")
    data = event.get("event_data") or {}
    host = data.get("host")
    if not host:
        return None
    task = str(data.get("task", ""))
    res = data.get("res")
    res = res if isinstance(res, dict) else {}
    if kind == "runner_on_start":
        return Progress(host, task, "started")
    if kind == "runner_on_ok":
        return Progress(host, task, "changed" if res.get("changed") else "ok", res)
    if kind == "runner_on_failed":
        return Progress(host, task, "ignored" if data.get("ignore_errors") else "failed", res)
    if kind == "runner_on_skipped":
        return Progress(host, task, "skipped", res)
    if kind == "runner_on_unreachable":
        return Progress(host, task, "unreachable", res)
    return None


@dataclass
class ProgressBoard:
    """Each host's current task and counts, as progress arrives (what a live view draws)."""

    COLUMNS = ("host", "task", "ok", "changed", "failed", "state")
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, p: Progress) -> bool:
        """Record one step; True when it is worth a line of its own (a change, a failure)."""
        row = self.rows.setdefault(p.host, {"task": "", "ok": 0, "changed": 0, "failed": 0, "state": "running"})
        row["task"] = p.task
        if p.status in ("ok", "changed", "failed"):
            row[p.status] += 1
        if p.status in ("failed", "unreachable"):
            row["state"] = p.status
        return p.status in ("changed", "failed", "unreachable")

    def table_rows(self) -> list[tuple[str, ...]]:
        return [
            (host, r["task"][:60], str(r["ok"]), str(r["changed"]), str(r["failed"]), r["state"])
            for host, r in self.rows.items()
        ]


@dataclass
class HostSummary:
    host: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    message: str = ""  # the first failure's message
    verdict: str | None = None  # from the verify report
    report: str | None = None

    @property
    def succeeded(self) -> bool:
        return not self.failed and not self.unreachable


@dataclass
class HostTally:
    """Accumulates what the events say about each host."""

    hosts: dict[str, HostSummary] = field(default_factory=dict)
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)  # gather.yml's gpuenv_host_facts per host
    stats_seen: bool = False
    touched: set[str] = field(default_factory=set)  # hosts any task started on

    def add(self, event: dict[str, Any]) -> None:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host = data.get("host")
        res = data.get("res") or {}
        if host and kind.startswith("runner_on_"):
            self.touched.add(str(host))
        if kind in ("runner_on_failed", "runner_on_unreachable") and host and not data.get("ignore_errors"):
            summary = self.hosts.setdefault(host, HostSummary(host))
            if not summary.message:
                summary.message = _message(data.get("task", ""), res)
        if kind == "runner_on_ok" and host and isinstance(res.get("ansible_facts"), dict):
            plan = res["ansible_facts"].get("nvidia_driver_plan") or res["ansible_facts"].get("amdgpu_plan")
            if isinstance(plan, dict):
                self.plans[host] = plan
            gathered = res["ansible_facts"].get("gpuenv_host_facts")
            if isinstance(gathered, dict):
                self.facts[host] = gathered
        if kind == "playbook_on_stats":
            self.stats_seen = True
            self._stats(data)

    def _stats(self, data: dict[str, Any]) -> None:
        columns = {"ok": "ok", "changed": "changed", "failures": "failed", "dark": "unreachable", "skipped": "skipped"}
        names = set()
        for key in (*columns, "processed"):
            names |= set((data.get(key) or {}).keys())
        for name in sorted(names):
            summary = self.hosts.setdefault(name, HostSummary(name))
            for key, attr in columns.items():
                setattr(summary, attr, int((data.get(key) or {}).get(name, 0)))


# Lines that explain a failure, where a tool prints them among others (pip, apt, dnf).
_EXPLAINING = re.compile(
    r"No matching distribution found|Could not find a version that satisfies|Unable to locate package"
    r"|^E: |^ERROR: |No package .* available|^Error: |Unable to find a match|has no installation candidate",
)


def _message(task: str, res: dict[str, Any]) -> str:
    """The task and the lines that explain its failure (pip's, apt's), else the module's first line."""
    texts = [str(res.get(key) or "") for key in ("stderr", "stdout", "msg", "module_stderr", "module_stdout")]
    lines = [line.strip() for text in texts for line in text.splitlines() if line.strip()]
    explaining = list(dict.fromkeys(line for line in lines if _EXPLAINING.search(line)))
    text = str(res.get("msg") or res.get("stderr") or res.get("reason") or "failed").strip()
    detail = "; ".join(explaining[:3]) if explaining else (text.splitlines()[0] if text else "failed")
    return f"{task}: {detail}"[:500] if task else detail[:500]
