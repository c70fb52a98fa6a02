"""The GPU history's records (pure): what it keeps of a verify report, and the events its sightings show.

A report becomes one ReportRecord (host names, start, the report's hash, outcome, finding codes)
with one GpuRecord per GPU (UUID, serial, bus id, whether a failing finding named it, its codes).
`events_of` is the query the fleet report shows: a GPU that failed before and is back in service
(on any host), and a GPU that moved between hosts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, NamedTuple

from gpuenv.verify.reportfile import Check, FindingGpu, HostGpu, ReportFile, Skipped, VerifyReport


class NotAReport(ValueError):
    """The document is not a gpuenv verify report (the caller names the file and skips it)."""


class GpuRecord(NamedTuple):  # a tuple: a fleet report records tens of thousands
    gpu_index: int | None  # NVML's
    uuid: str | None
    serial: str | None
    bus_id: str | None
    name: str | None
    failed: bool  # a failing finding named this GPU
    codes: tuple[str, ...]  # codes of the warn and fail findings that named it


@dataclass(frozen=True)
class ReportRecord:
    host: str  # the name the fleet knows the host by (its inventory name, else its hostname)
    hostname: str  # the report's own: with the start time and the hash, what makes a report one row
    started: str  # UTC, ISO 8601 with microseconds: sorts as text
    digest: str
    outcome: str
    codes: tuple[str, ...]  # every warn and fail finding's code in the report
    gpus: tuple[GpuRecord, ...]
    source: str | None = None


@dataclass(frozen=True)
class Sighting:
    """One GPU in one report, as the history holds it."""

    uuid: str
    serial: str | None
    host: str
    started: str
    outcome: str
    failed: bool
    codes: tuple[str, ...]


@dataclass(frozen=True)
class GpuEvent:
    """Something the history knows about a GPU that one report alone cannot show."""

    kind: Literal["returned", "moved"]
    uuid: str
    serial: str | None
    host: str  # where the GPU is now (its newest report)
    started: str  # when that report started
    previous_host: str  # returned: where it failed; moved: where it was seen before
    previous_started: str  # returned: when it failed; moved: when it was last seen there
    codes: tuple[str, ...]  # returned: the codes of that failure

    @property
    def message(self) -> str:
        when = self.previous_started[:10]
        if self.kind == "returned":
            why = f" ({', '.join(self.codes)})" if self.codes else ""
            return f"{self.uuid} failed on {when} on {self.previous_host}{why}, now in {self.host}"
        return f"{self.uuid} moved from {self.previous_host} (last seen {when}) to {self.host}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "gpu_uuid": self.uuid,
            "gpu_serial": self.serial,
            "host": self.host,
            "started": self.started,
            "previous_host": self.previous_host,
            "previous_started": self.previous_started,
            "codes": list(self.codes),
            "message": self.message,
        }


# --- pure: a report to its record, sightings to events ----------------------------------------


def utc_text(value: str) -> str:
    """A report's timestamp as UTC text that sorts in time order; NotAReport when it is no timestamp."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (TypeError, ValueError, AttributeError) as exc:
        raise NotAReport(f"'started' is not a timestamp: {str(value)[:40]!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record_from_report(
    report: VerifyReport, *, raw: bytes, host: str | None = None, source: str | None = None
) -> ReportRecord:
    """What the history keeps of one verify report read from `raw` (its hash is the report's);
    host: the name the fleet knows it by (default: the report's hostname)."""
    if report.verdict is None:
        raise NotAReport("a verify report without its verdict")
    hostname = report.host.hostname
    if not hostname:
        raise NotAReport("a verify report without a host name")
    findings = [f for c in report.checks for f in _findings(c)]
    return ReportRecord(
        host=host or hostname,
        hostname=hostname,
        started=utc_text(report.started),
        digest=hashlib.sha256(raw).hexdigest(),
        outcome=report.verdict.outcome,
        codes=tuple(sorted({code for code, _, _ in findings})),
        gpus=tuple(_gpu_record(g, findings) for g in report.host.gpus),
        source=source,
    )


Named = tuple[str, str, FindingGpu | None]  # a warn or fail finding: (code, severity, the GPU it names)


def _findings(check: Check) -> Iterator[Named]:
    """(code, severity, gpu) of each warn or fail finding; a finding without a code is named by its check."""
    for f in check.findings:
        if f.severity in ("warn", "fail"):
            yield f.code or check.name or "unknown", f.severity, f.gpu


def _gpu_record(gpu: HostGpu, findings: list[Named]) -> GpuRecord:
    uuid = gpu.uuid or None
    mine = [(code, severity) for code, severity, other in findings if _names(other, uuid, gpu.index)]
    return GpuRecord(
        gpu.index,
        uuid,
        gpu.serial or None,
        gpu.pci_bus_id or None,
        gpu.name or None,
        any(severity == "fail" for _, severity in mine),
        tuple(sorted({code for code, _ in mine})),
    )


def _names(ref: FindingGpu | None, uuid: str | None, index: int | None) -> bool:
    """Whether a finding's GPU reference names this GPU: by UUID where both have one, else by index."""
    if ref is None:
        return False
    if ref.uuid and uuid:
        return ref.uuid == uuid
    return ref.index == index


def events_of(sightings: Iterable[Sighting]) -> list[GpuEvent]:
    """Per GPU, judged at its newest sighting: back in service after a failure, and moved between hosts."""
    by_uuid: dict[str, list[Sighting]] = {}
    for s in sightings:
        by_uuid.setdefault(s.uuid, []).append(s)
    events: list[GpuEvent] = []
    for uuid, seen in sorted(by_uuid.items()):
        seen.sort(key=lambda s: (s.started, s.host))
        now, before = seen[-1], seen[:-1]
        failures = [s for s in before if s.failed]
        if failures and not now.failed:
            last = failures[-1]
            events.append(
                GpuEvent("returned", uuid, now.serial, now.host, now.started, last.host, last.started, last.codes)
            )
        if before and before[-1].host != now.host:
            prev = before[-1]
            events.append(GpuEvent("moved", uuid, now.serial, now.host, now.started, prev.host, prev.started, ()))
    return events


def records_of(
    reads: Iterable[tuple[ReportFile | Skipped, str | None]],
) -> tuple[list[ReportRecord], list[str]]:
    """What the history keeps of files already read, and the files that are no report, each named with why."""
    records, skipped = [], []
    for found, host in reads:
        if isinstance(found, Skipped):
            skipped.append(f"{found.path}: {found.reason}")
        elif not isinstance(found.document, VerifyReport):
            skipped.append(f"{found.path}: not a gpuenv verify report")
        else:
            try:
                records.append(record_from_report(found.document, raw=found.raw, host=host, source=found.path))
            except NotAReport as exc:
                skipped.append(f"{found.path}: {exc}")
    return records, skipped
