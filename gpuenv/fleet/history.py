"""GPU identity history: every report the controller collects, remembered in one SQLite file.

One row per report (the report's host name, its start time and a hash of the report make it
unique, so ingesting the same report twice keeps one row, whichever command ingests it; the row
also keeps the name the fleet knows the host by) and one row per GPU in it (UUID, serial, bus id,
whether a failing finding named it, its finding codes): the records of gpuenv.fleet.history_records.
The file is stamped as gpuenv's (PRAGMA application_id, user_version); one made before the stamp
is known by its exact tables and stamped when next opened; any other SQLite file is refused before
anything is written to it (no table added, no WAL). WAL mode lets many processes ingest at once;
the file belongs on a local filesystem (SQLite's locking is unreliable on network filesystems), so
nodes write reports and the controller ingests them.

`gpu_events` runs the records' event query (`events_of`) over the file, for the fleet report.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from gpuenv.errors import BadRequest, CannotRun
from gpuenv.files import check_file_or_absent
from gpuenv.fleet import history_records
from gpuenv.fleet.history_records import GpuEvent, ReportRecord, Sighting, events_of, records_of
from gpuenv.fleet.report_model import DEFAULT_CLOCK_SKEW_S
from gpuenv.verify import reportfile

SCHEMA_VERSION = 1
APPLICATION_ID = 0x67707568  # "gpuh": PRAGMA application_id of every history gpuenv writes
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

# The tables of a history (schema 1), and so of one gpuenv wrote before it stamped its files (application_id 0).
TABLES = {
    "gpus": ("report_id", "gpu_index", "uuid", "serial", "bus_id", "name", "failed", "codes"),
    "reports": ("id", "host", "hostname", "started", "digest", "outcome", "codes", "source", "ingested"),
}


@dataclass(frozen=True)
class IngestResult:
    added: int
    already: int  # reports the history already held


# --- the file ---------------------------------------------------------------------------------


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
    """The history file, made if missing, in WAL mode, with its tables, stamped as gpuenv's. A file that
    is not a gpuenv history (another program's SQLite database) is refused before anything is written;
    anything but a regular file (a device, a FIFO, a folder) before SQLite opens it."""
    check_file_or_absent(path, "--history", hint="give --history a file path (made if missing), or --no-history")
    _check_local(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise BadRequest(f"cannot open the history {path}: {exc}", hint="give a writable --history FILE") from exc
    with closing(db):
        try:
            version = _checked_version(db, path)
            wal(db)
            db.execute("PRAGMA synchronous=NORMAL")  # WAL's recommended setting: no fsync per commit
            db.execute("PRAGMA foreign_keys=ON")
            if version < SCHEMA_VERSION or _application_id(db) != APPLICATION_ID:
                with _transaction(db):  # executescript would commit at once: one statement at a time
                    for statement in filter(str.strip, _TABLES.split(";")):
                        db.execute(statement)
                    db.execute(f"PRAGMA application_id={APPLICATION_ID}")
                    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # SQLite's message may quote damaged bytes
            raise BadRequest(f"{path} is not a gpuenv history: {exc}", hint="give another --history FILE") from exc
        try:
            yield db
        except UnicodeDecodeError as exc:
            raise BadRequest(f"the history {path} is damaged: {exc}", hint="restore it, or give another file") from exc
        except sqlite3.DatabaseError as exc:
            if (getattr(exc, "sqlite_errorname", None) or "").split("_")[:2] in _MACHINE_TROUBLE:
                raise CannotRun(f"cannot use the history {path}: {exc}", hint="retry, or check its disk") from exc
            hint = "restore it, or give another --history FILE"
            raise BadRequest(f"the history {path} is damaged: {exc}", hint=hint) from exc


# SQLite's errors that say this machine's trouble (a lock held past the busy timeout, a full or failing
# disk, no permission), not a damaged file
_MACHINE_TROUBLE = [["SQLITE", n] for n in ("BUSY", "LOCKED", "FULL", "IOERR", "READONLY", "CANTOPEN", "PERM")]


def _application_id(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA application_id").fetchone()[0])


def _checked_version(db: sqlite3.Connection, path: Path) -> int:
    """The history's schema version, read without writing: an empty file, or one with exactly gpuenv's
    tables, stamped as gpuenv's or made before gpuenv stamped its files; anything else is refused."""
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    stamp = _application_id(db)
    if stamp in (0, APPLICATION_ID) and _tables(db) in ({}, TABLES) and version <= SCHEMA_VERSION:
        return version
    if stamp == APPLICATION_ID and version > SCHEMA_VERSION:
        raise BadRequest(
            f"the history {path} was written by a newer gpuenv (schema {version})",
            hint="upgrade gpuenv, or give another --history FILE",
        )
    raise BadRequest(
        f"{path} is not a gpuenv history (another program's SQLite database): left unchanged",
        hint="give --history a file gpuenv made, or a path where none exists yet",
    )


def _tables(db: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    """Every table of the file with its columns, in order."""
    names = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return {n: tuple(row[1] for row in db.execute("SELECT * FROM pragma_table_info(?)", (n,))) for n in names}


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
    if not path.exists():  # anything else but a regular file, connect refuses
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


def report_count(path: Path) -> int:
    """How many reports the history holds (0 when there is none yet)."""
    if not path.is_file():
        return 0
    with connect(path) as db:
        return int(db.execute("SELECT count(*) FROM reports").fetchone()[0])


@dataclass(frozen=True)
class HostSeen:
    host: str
    last_seen: str  # the start of its newest report
    last_outcome: str
    reports: int
    gpus: int  # in its newest report
    events: int  # of the GPUs now in it
    future_dated: int = 0  # reports dated ahead of this machine's clock: no real run (last_seen may be one)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuSeen:
    uuid: str
    serial: str | None
    host: str  # where its newest report saw it
    last_seen: str
    reports: int
    failed: int  # reports in which a failing finding named it
    events: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# SQLite takes a bare column's value from the row that gave the max(): the newest report's
_HOSTS = """
SELECT r.host, max(r.started), r.outcome, count(*), (SELECT count(*) FROM gpus g WHERE g.report_id = r.id),
    sum(r.started > ?)
FROM reports r GROUP BY r.host ORDER BY r.host
"""
_GPUS = """
SELECT g.uuid, g.serial, r.host, max(r.started), count(*), sum(g.failed)
FROM gpus g JOIN reports r ON r.id = g.report_id WHERE g.uuid IS NOT NULL GROUP BY g.uuid ORDER BY r.host, g.uuid
"""


def listing(path: Path) -> tuple[list[HostSeen], list[GpuSeen]]:
    """Every host and GPU the history holds, with when it was last seen and how many events it has."""
    if not path.exists():  # anything else but a regular file, connect refuses
        raise BadRequest(f"no history at {path}", hint="fleet verify and fleet report record one; or give --history")
    ahead = datetime.now(timezone.utc) + timedelta(seconds=DEFAULT_CLOCK_SKEW_S)  # a later report: future-dated
    horizon = history_records.utc_text(ahead.isoformat())
    with connect(path) as db:
        hosts = db.execute(_HOSTS, (horizon,)).fetchall()
        gpus = db.execute(_GPUS).fetchall()
    events: dict[str, int] = {}
    for event in gpu_events(path, [row[0] for row in gpus]):
        events[event.uuid] = events.get(event.uuid, 0) + 1
    gpu_rows = [
        GpuSeen(uuid, serial, host, seen, n, int(failed or 0), events.get(uuid, 0))
        for uuid, serial, host, seen, n, failed in gpus
    ]
    per_host: dict[str, int] = {}
    for g in gpu_rows:
        per_host[g.host] = per_host.get(g.host, 0) + g.events
    return [
        HostSeen(host, seen, outcome, n, gpus, per_host.get(host, 0), ahead)
        for host, seen, outcome, n, gpus, ahead in hosts
    ], gpu_rows


def ingest_files(path: Path, reports: Iterable[tuple[Path, str | None]]) -> tuple[IngestResult, list[str]]:
    """Read each (file, host name or None) and ingest what is a verify report; the others are named, not fatal."""
    return ingest_read(path, ((reportfile.read(file), host) for file, host in reports))


def ingest_read(
    path: Path, reads: Iterable[tuple[reportfile.ReportFile | reportfile.Skipped, str | None]]
) -> tuple[IngestResult, list[str]]:
    """Ingest files already read (each with its host name or None); the ones that are no report are named."""
    records, skipped = records_of(reads)
    return ingest(path, records), skipped
