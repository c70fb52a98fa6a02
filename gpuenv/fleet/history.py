"""GPU identity history: every report the controller collects, remembered in one SQLite file.

One row per report (the report's host name, its start time and a hash of the report make it
unique, so ingesting the same report twice keeps one row, whichever command ingests it; the row
also keeps the name the fleet knows the host by) and one row per GPU in it (UUID, serial, bus id,
whether a failing finding named it, its finding codes). WAL mode lets many processes ingest at once; the
file belongs on a local filesystem (SQLite's locking is unreliable on network filesystems), so
nodes write reports and the controller ingests them.

`events_of` is the pure query the fleet report uses: a GPU that failed before and is back in
service (on any host), and a GPU that moved between hosts; `gpu_events` runs it over the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, NamedTuple

from gpuenv.errors import BadRequest

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 120.0  # a writer waits this long for another one's transaction
NETWORK_FILESYSTEMS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "9p", "afs", "ceph", "lustre"})
_TABLES = """
CREATE TABLE IF NOT EXISTS reports (
    id INTEGER PRIMARY KEY,
    host TEXT NOT NULL,
    hostname TEXT NOT NULL,
    started TEXT NOT NULL,
    digest TEXT NOT NULL,
    outcome TEXT NOT NULL,
    codes TEXT NOT NULL,
    source TEXT,
    ingested TEXT NOT NULL,
    UNIQUE (hostname, started, digest)
);
CREATE TABLE IF NOT EXISTS gpus (
    report_id INTEGER NOT NULL REFERENCES reports(id),
    gpu_index INTEGER,
    uuid TEXT,
    serial TEXT,
    bus_id TEXT,
    name TEXT,
    failed INTEGER NOT NULL,
    codes TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS gpus_by_uuid ON gpus (uuid);
CREATE INDEX IF NOT EXISTS gpus_by_serial ON gpus (serial);
CREATE INDEX IF NOT EXISTS gpus_by_report ON gpus (report_id);
CREATE INDEX IF NOT EXISTS reports_by_host ON reports (host, started);
CREATE INDEX IF NOT EXISTS reports_by_hostname ON reports (hostname, started);
"""


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
class IngestResult:
    added: int
    already: int  # reports the history already held


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


def record_from_report(doc: Any, *, raw: bytes, host: str | None = None, source: str | None = None) -> ReportRecord:
    """What the history keeps of one verify report parsed from `raw` (its hash is the report's);
    host: the name the fleet knows it by (default: the report's hostname)."""
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("gpuenv.verify-report/"):
        raise NotAReport("not a gpuenv verify report (no gpuenv.verify-report schema)")
    node, verdict = doc.get("host"), doc.get("verdict")
    if not isinstance(node, dict) or not isinstance(verdict, dict) or not isinstance(node.get("gpus", []), list):
        raise NotAReport("a verify report without its host or verdict")
    hostname = node.get("hostname")
    if not isinstance(hostname, str) or not hostname:
        raise NotAReport("a verify report without a host name")
    findings = [f for c in doc.get("checks") or [] if isinstance(c, dict) for f in _findings(c)]
    gpus = tuple(_gpu_record(g, findings) for g in node.get("gpus") or [] if isinstance(g, dict))
    digest = hashlib.sha256(raw).hexdigest()
    return ReportRecord(
        host=host or hostname,
        hostname=hostname,
        started=utc_text(str(doc.get("started", ""))),
        digest=digest,
        outcome=str(verdict.get("outcome", "unknown")),
        codes=tuple(sorted({code for code, _, _ in findings})),
        gpus=gpus,
        source=source,
    )


def _findings(check: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any] | None]]:
    """(code, severity, gpu) of each warn or fail finding; a finding without a code is named by its check."""
    for f in check.get("findings") or ():
        if isinstance(f, dict) and f.get("severity") in ("warn", "fail"):
            gpu = f.get("gpu") if isinstance(f.get("gpu"), dict) else None
            yield str(f.get("code") or check.get("name") or "unknown"), str(f["severity"]), gpu


def _gpu_record(gpu: dict[str, Any], findings: list[tuple[str, str, dict[str, Any] | None]]) -> GpuRecord:
    index, uuid = gpu.get("index"), _text(gpu.get("uuid"))
    mine = [(code, severity) for code, severity, other in findings if _names(other, uuid, index)]
    return GpuRecord(
        index if type(index) is int else None,
        uuid,
        _text(gpu.get("serial")),
        _text(gpu.get("pci_bus_id")),
        _text(gpu.get("name")),
        any(severity == "fail" for _, severity in mine),
        tuple(sorted({code for code, _ in mine})),
    )


def _names(ref: dict[str, Any] | None, uuid: str | None, index: Any) -> bool:
    """Whether a finding's GPU reference names this GPU: by UUID where both have one, else by index."""
    if ref is None:
        return False
    if ref.get("uuid") and uuid:
        return bool(ref["uuid"] == uuid)
    return bool(ref.get("index") == index)


def _text(value: Any) -> str | None:
    return value if type(value) is str and value else None


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


# --- the file ---------------------------------------------------------------------------------


def default_path(env: Mapping[str, str] | None = None) -> Path:
    """$XDG_STATE_HOME/gpuenv/history.sqlite, else ~/.local/state/gpuenv/history.sqlite."""
    env = os.environ if env is None else env
    state = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(state) / "gpuenv" / "history.sqlite"


def filesystem_of(path: Path, mounts: str) -> str:
    """The type of the filesystem holding path, from the text of /proc/self/mounts (pure)."""
    best, kind = "", ""
    target = str(path)
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def _check_local(path: Path) -> None:
    try:
        mounts = Path("/proc/self/mounts").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return  # not Linux: nothing to check against
    kind = filesystem_of(path.parent.resolve(), mounts)
    if kind in NETWORK_FILESYSTEMS:
        raise BadRequest(
            f"--history {path} is on a {kind} filesystem, where SQLite's locking cannot be trusted",
            hint="keep the history on the controller's local disk (nodes write reports, the controller ingests them)",
        )


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    """The history file, made if missing, in WAL mode, with its tables."""
    _check_local(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise BadRequest(f"cannot open the history {path}: {exc}", hint="give a writable --history FILE") from exc
    with closing(db):
        try:
            wal(db)
            db.execute("PRAGMA synchronous=NORMAL")  # WAL's recommended setting: no fsync per commit
            db.execute("PRAGMA foreign_keys=ON")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise BadRequest(
                    f"the history {path} was written by a newer gpuenv (schema {version})",
                    hint="upgrade gpuenv, or give another --history FILE",
                )
            if version < SCHEMA_VERSION:
                with _transaction(db):  # executescript would commit at once: one statement at a time
                    for statement in filter(str.strip, _TABLES.split(";")):
                        db.execute(statement)
                    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise BadRequest(f"{path} is not a gpuenv history: {exc}", hint="give another --history FILE") from exc
        yield db


def wal(db: sqlite3.Connection, *, timeout: float = BUSY_TIMEOUT_S) -> None:
    """The file in WAL mode. Leaving rollback mode takes the file's exclusive lock, and where two
    connections both want to upgrade their locks SQLite answers "locked" at once rather than wait
    (a deadlock otherwise; see sqlite3_busy_handler): the answer is to retry, as a fresh history's
    first writers do at once."""
    deadline, pause = time.monotonic() + timeout, 0.005
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")  # take the write lock now: waiting for it honours the busy timeout
    try:
        yield
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    if db.in_transaction:
        db.execute("COMMIT")


def check(path: Path) -> None:
    """The history made if missing; BadRequest when it cannot be used (see connect)."""
    with connect(path):
        pass


def ingest(path: Path, records: Iterable[ReportRecord]) -> IngestResult:
    """Add reports to the history in one transaction; a report it already holds is counted, not added."""
    added = already = 0
    gpu_rows: list[tuple[Any, ...]] = []
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with connect(path) as db, _transaction(db):
        for r in records:
            cursor = db.execute(
                "INSERT OR IGNORE INTO reports (host, hostname, started, digest, outcome, codes, source, ingested)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (r.host, r.hostname, r.started, r.digest, r.outcome, ",".join(r.codes), r.source, now),
            )
            if cursor.rowcount == 0:
                already += 1
                continue
            added += 1
            gpu_rows += [
                (cursor.lastrowid, g.gpu_index, g.uuid, g.serial, g.bus_id, g.name, int(g.failed), ",".join(g.codes))
                for g in r.gpus
            ]
        db.executemany(
            "INSERT INTO gpus (report_id, gpu_index, uuid, serial, bus_id, name, failed, codes)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            gpu_rows,
        )
    return IngestResult(added, already)


@dataclass(frozen=True)
class TimelineRow:
    """One report of the timeline, with the GPU the key named (or each GPU, for a host key)."""

    started: str
    host: str
    outcome: str
    report_codes: tuple[str, ...]
    source: str | None
    gpu_index: int | None
    uuid: str | None
    serial: str | None
    bus_id: str | None
    gpu_failed: bool
    gpu_codes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "host": self.host,
            "outcome": self.outcome,
            "codes": list(self.report_codes),
            "report": self.source,
            "gpu": None
            if self.gpu_index is None and self.uuid is None
            else {
                "index": self.gpu_index,
                "uuid": self.uuid,
                "serial": self.serial,
                "pci_bus_id": self.bus_id,
                "failed": self.gpu_failed,
                "codes": list(self.gpu_codes),
            },
        }


_TIMELINE = """
SELECT r.started, r.host, r.outcome, r.codes, r.source, g.gpu_index, g.uuid, g.serial, g.bus_id, g.failed, g.codes
FROM reports r LEFT JOIN gpus g ON g.report_id = r.id
WHERE {where}
ORDER BY r.started, r.host, g.gpu_index
"""


def timeline(path: Path, key: str) -> tuple[str, list[TimelineRow]]:
    """The history of a GPU (by UUID or serial) or of a host, oldest first; also says which the key was."""
    if not path.is_file():
        raise BadRequest(
            f"no history at {path}", hint="fleet verify and fleet report record one; or give --history FILE"
        )
    with connect(path) as db:
        for kind, where in (("gpu", "g.uuid = ? OR g.serial = ?"), ("host", "r.host = ? OR r.hostname = ?")):
            rows = db.execute(_TIMELINE.format(where=where), (key, key)).fetchall()
            if rows:
                return kind, [_timeline_row(row) for row in rows]
    return "none", []


def _timeline_row(row: tuple[Any, ...]) -> TimelineRow:
    started, host, outcome, codes, source, index, uuid, serial, bus_id, failed, gpu_codes = row
    return TimelineRow(
        started, host, outcome, _split(codes), source, index, uuid, serial, bus_id, bool(failed), _split(gpu_codes)
    )


def _split(text: str | None) -> tuple[str, ...]:
    return tuple(c for c in (text or "").split(",") if c)


def gpu_events(path: Path, uuids: Iterable[str]) -> list[GpuEvent]:
    """The events (returned after a failure, moved between hosts) of these GPUs, over the whole history."""
    wanted = sorted({u for u in uuids if u})  # sorted: each chunk reads neighbouring index pages
    if not wanted or not path.is_file():
        return []
    sightings: list[Sighting] = []
    with connect(path) as db:
        candidates = [
            u for chunk in _chunks(wanted) for (u,) in db.execute(_CANDIDATES.format(marks=_marks(chunk)), chunk)
        ]
        for chunk in _chunks(candidates):
            sightings += [
                Sighting(uuid, serial, host, started, outcome, bool(failed), _split(codes))
                for uuid, serial, host, started, outcome, failed, codes in db.execute(
                    _SIGHTINGS.format(marks=_marks(chunk)), chunk
                )
            ]
    return events_of(sightings)


# Only a GPU seen on two hosts, or seen failing and seen again, can have an event: SQL sets the
# others aside, so a fleet of healthy GPUs that stay put costs no Python per GPU.
_CANDIDATES = """
SELECT g.uuid FROM gpus g JOIN reports r ON r.id = g.report_id WHERE g.uuid IN ({marks})
GROUP BY g.uuid HAVING count(DISTINCT r.host) > 1 OR (max(g.failed) = 1 AND count(*) > 1)
"""
_SIGHTINGS = """
SELECT g.uuid, g.serial, r.host, r.started, r.outcome, g.failed, g.codes
FROM gpus g JOIN reports r ON r.id = g.report_id WHERE g.uuid IN ({marks})
"""


def _chunks(values: list[str], size: int = 500) -> Iterator[list[str]]:  # SQLite's limit on bound parameters
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _marks(chunk: list[str]) -> str:
    return ",".join("?" * len(chunk))


def ingest_files(path: Path, reports: Iterable[tuple[Path, str | None]]) -> tuple[IngestResult, list[str]]:
    """Read each (file, host name or None) and ingest what is a verify report; the others are named, not fatal."""
    from gpuenv.errors import GpuenvError
    from gpuenv.files import read_bytes

    records, skipped = [], []
    for file, host in reports:
        try:
            raw = read_bytes(file, "report")
            records.append(record_from_report(json.loads(raw), raw=raw, host=host, source=str(file)))
        except (GpuenvError, ValueError) as exc:
            skipped.append(f"{file}: {getattr(exc, 'message', exc)}")
    return ingest(path, records), skipped
