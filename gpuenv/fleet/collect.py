"""The end of `fleet verify` both fan-outs share: each host's answer becomes its outcome and its
HOST.json as it arrives; at the end, the summary (SUMMARY_FILE, what `--retry-failed` reads back),
the GPU history and the fleet report over the reports collected."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuenv.errors import GpuenvError
from gpuenv.files import write_atomic
from gpuenv.fleet import stats
from gpuenv.fleet.history import gpu_events, ingest
from gpuenv.fleet.history_records import ReportRecord, records_of
from gpuenv.fleet.onhost import Answer, judge
from gpuenv.fleet.report_compare import compare, failures_by_code
from gpuenv.fleet.report_model import Entry, FleetReport, HostReport, Skipped
from gpuenv.fleet.report_reading import entry_of
from gpuenv.fleet.request import SUMMARY_FILE
from gpuenv.types import OUTCOMES, Outcome
from gpuenv.verify import reportfile
from gpuenv.verify.reportfile import FLEET_VERIFY_SCHEMA as SCHEMA
from gpuenv.verify.reportfile import ReportFile

HINTS = {"not provisioned": "run gpuenv provision", "unreachable": "check SSH to the host"}
SLURM_HINTS = {**HINTS, "unreachable": "sinfo -R shows why"}


@dataclass(frozen=True)
class HostOutcome:
    host: str
    outcome: Outcome
    report: str | None
    message: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "outcome": self.outcome, "report": self.report, "message": self.message}


@dataclass(frozen=True)
class FleetVerifyResult:
    hosts: tuple[HostOutcome, ...]
    reports_dir: Path
    status: str  # the fan-out's: successful | failed | timeout (ansible-runner's words), or "nothing to retry"
    history: Path | None
    history_notes: tuple[str, ...] = ()  # reports the history could not take
    fleet: FleetReport | None = None  # the fleet report over the reports collected
    hints: dict[str, str] = field(default_factory=lambda: HINTS)  # what to do about an outcome, by outcome

    @property
    def exit_code(self) -> int:
        return 0 if all(h.outcome == "certified" for h in self.hosts) else 1

    def counts(self) -> dict[str, int]:
        return {o: n for o in OUTCOMES if (n := sum(h.outcome == o for h in self.hosts))}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "status": self.status,
            "reports_dir": str(self.reports_dir),
            "counts": self.counts(),
            "hosts": [h.to_dict() for h in self.hosts],
            "history": None if self.history is None else str(self.history),
            "fleet_report": None if self.fleet is None else self.fleet.to_dict(),
        }


@dataclass
class Collector:
    """Each host's answer, judged as it comes: its report written to REPORTS/HOST.json and read once,
    and only what the end needs of it kept (the history's record, the fleet report's entry)."""

    reports_dir: Path
    venv: str
    on_host: Callable[[HostOutcome], None] = lambda _: None
    outcomes: dict[str, HostOutcome] = field(default_factory=dict)
    entries: dict[str, Entry] = field(default_factory=dict)
    records: list[ReportRecord] = field(default_factory=list)
    unrecorded: list[str] = field(default_factory=list)  # reports the history cannot take, and why

    def add(self, host: str, answer: Answer) -> HostOutcome:
        path = self.reports_dir / f"{host}.json"
        found = reportfile.parse(str(path), answer.stdout, time.time()) if answer.stdout.strip() else None
        kept = isinstance(found, ReportFile) or (found is not None and found.claimed)  # a corrupt one: to look at
        if found is not None and kept:
            write_atomic(path, answer.stdout.decode("utf-8", "replace"))
            self._keep(host, found)
        outcome, message = judge(answer, reportfile.verdict(found) if found else None, venv=self.venv)
        return self.say(HostOutcome(host, outcome, str(path) if kept else None, message))

    def _keep(self, host: str, found: ReportFile | reportfile.Skipped) -> None:
        self.entries[host] = entry_of(found)
        records, unrecorded = records_of([(found, host)])
        self.records += records
        self.unrecorded += unrecorded

    def say(self, outcome: HostOutcome) -> HostOutcome:
        """A host's outcome, known without an answer from it (unreachable before the run, not run at all)."""
        self.outcomes[outcome.host] = outcome
        self.on_host(outcome)
        return outcome

    def unanswered(self, targets: tuple[str, ...], *, outcome: Outcome, message: str) -> None:
        """The targets that sent no answer at all end with this outcome."""
        for host in targets:
            if host not in self.outcomes:
                self.say(HostOutcome(host, outcome, None, message))

    def finish(
        self, status: str, history: Path | None, order: tuple[str, ...], *, hints: dict[str, str] = HINTS
    ) -> FleetVerifyResult:
        """The summary written, the reports recorded in the history, the fleet report (hosts in `order` first)."""
        ranked = {host: n for n, host in enumerate(order)}
        hosts = tuple(sorted(self.outcomes.values(), key=lambda h: ranked.get(h.host, len(ranked))))
        result = FleetVerifyResult(hosts, self.reports_dir, status, history, hints=hints)
        write_atomic(self.reports_dir / SUMMARY_FILE, json.dumps(result.to_dict(), indent=2) + "\n")
        notes = self._record(history)
        return replace(result, history_notes=notes, fleet=fleet_report_of(hosts, self.entries, history))

    def _record(self, history_file: Path | None) -> tuple[str, ...]:
        if history_file is None:
            return ()
        try:
            ingest(history_file, self.records)
        except (GpuenvError, sqlite3.Error) as exc:  # the hosts' outcomes stand; only the record is missing
            return (f"{history_file}: {getattr(exc, 'message', exc)}",)
        return tuple(self.unrecorded)


def fleet_report_of(
    outcomes: tuple[HostOutcome, ...], entries: Mapping[str, Entry], history_file: Path | None
) -> FleetReport:
    """The fleet report over a run's reports (what entry_of kept of each, by host), each host by its
    inventory name and outcome (a host without a report counts with its outcome alone), with the
    history's events for its GPUs."""
    hosts, skipped = [], []
    for h in outcomes:
        entry = entries.get(h.host)
        if isinstance(entry, Skipped):
            skipped.append(entry)
        if not isinstance(entry, HostReport):  # none came back, or it was not a report
            entry = HostReport(h.host, h.report or "", h.outcome, "", "-", 0, (), (), ())
        hosts.append(replace(entry, host=h.host, outcome=h.outcome))
    rule = stats.Rule()
    groups, outliers = compare(hosts, rule, stats.MIN_JUDGED)
    failures = tuple(failures_by_code(hosts))
    events = _events(history_file, [g.uuid for h in hosts for g in h.gpus if g.uuid])
    return FleetReport(
        tuple(hosts), tuple(skipped), tuple(groups), failures, tuple(outliers), rule, stats.MIN_JUDGED, 0, events
    )


def _events(history_file: Path | None, uuids: list[str]) -> tuple[dict[str, Any], ...]:
    if history_file is None:
        return ()
    try:
        return tuple(e.to_dict() for e in gpu_events(history_file, uuids))
    except (GpuenvError, sqlite3.Error):  # said once already, by the record that failed
        return ()


@dataclass
class FleetBoard:
    """Live progress: hosts done out of the total, failures so far."""

    total: int
    done: int = 0
    failures: int = 0

    def add(self, host: HostOutcome) -> str:
        """Count one host that ended; the line that says so."""
        self.done += 1
        self.failures += host.outcome != "certified"
        return f"[{self.done}/{self.total} done, {self.failures} failing] {host.host}: {host.outcome}"
