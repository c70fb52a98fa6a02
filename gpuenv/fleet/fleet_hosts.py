"""A fleet as its verify reports describe it: each host's newest report, from a folder of reports (read as
`fleet report` reads them: bounded, foreign files named, a report dated ahead of the clock flagged) or from the
GPU history (each host's newest report, read again from where it was recorded). What `fleet compat`,
`resolve --fleet`, `build-image --fleet` and `provision --fleet` judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from gpuenv.errors import BadRequest
from gpuenv.fleet.history import connect
from gpuenv.fleet.report_model import DEFAULT_CLOCK_SKEW_S, FUTURE_DATED, HostReport, Skipped
from gpuenv.fleet.report_reading import load, report_files, workers_for
from gpuenv.fleet.source import FleetSource


@dataclass(frozen=True)
class FleetHost:
    """A host and its newest report (None: none could be read), or why it cannot be judged."""

    host: str
    report: HostReport | None
    doubt: str | None = None  # why its report says nothing trustworthy now: stale, future-dated, unreadable


@dataclass(frozen=True)
class Fleet:
    hosts: tuple[FleetHost, ...]
    skipped: tuple[Skipped, ...]  # files that are no report (a claimed one is a host whose verdict is lost)


def read_fleet(source: FleetSource, now: datetime | None = None) -> Fleet:
    """Every host of the fleet with its newest report; exit 2 when the source holds none."""
    if (source.history is None) == (not source.paths):
        raise BadRequest(
            "give the fleet's reports or its GPU history, one of them", hint="--fleet DIR or --fleet-history DB"
        )
    now = now or datetime.now(timezone.utc)
    named = _history_sources(source.history) if source.history is not None else {}
    files = list(named) if source.history is not None else list(report_files(source.paths))
    with workers_for(len(files)) as pool:
        skew = DEFAULT_CLOCK_SKEW_S if source.clock_skew_s is None else source.clock_skew_s
        reports, skipped, _ = load(files, pool, clock_skew_s=skew)
    hosts = [FleetHost(named.get(r.path, r.host), r, _doubt(r, now, source.max_age_days)) for r in reports]
    lost = {s.path: s.reason for s in skipped}
    hosts += [
        FleetHost(host, None, f"its newest report {path} cannot be read: {lost[path]}")
        for path, host in named.items()
        if path in lost
    ]
    claimed = [s for s in skipped if s.claimed and s.path not in named]
    hosts += [FleetHost(s.path, None, f"a report that cannot be read: {s.reason}") for s in claimed]
    if not hosts:
        raise BadRequest(
            f"no gpuenv verify report in {source.named()} ({len(skipped)} file(s) skipped)",
            hint="give the reports written by `gpuenv verify --report FILE` or `gpuenv fleet verify`",
        )
    return Fleet(tuple(sorted(hosts, key=lambda h: h.host)), tuple(s for s in skipped if s.path not in named))


def _doubt(report: HostReport, now: datetime, max_age_days: float) -> str | None:
    if report.outcome == FUTURE_DATED:
        return f"its only report is dated {report.started}, ahead of this machine's clock"
    try:
        started = datetime.fromisoformat(report.started.replace("Z", "+00:00"))
    except ValueError:
        return f"its report's start {report.started!r} is no timestamp"
    age = (now - (started if started.tzinfo else started.replace(tzinfo=timezone.utc))).total_seconds() / 86400
    if age > max_age_days:
        return f"its newest report is {age:.0f} days old (over {max_age_days:g})"
    return None


def _history_sources(path: Path) -> dict[str, str]:
    """Each host's newest report in the history, by the file it was read from: {path: host}."""
    if not path.is_file():
        raise BadRequest(
            f"no GPU history at {path}", hint="give the file `fleet report --history` or `fleet history` keeps"
        )
    query = (
        "SELECT host, source FROM reports r WHERE started = (SELECT MAX(started) FROM reports WHERE host = r.host) "
        "ORDER BY host"
    )
    with connect(path) as db:  # refuses a file that is no gpuenv history
        rows = db.execute(query).fetchall()
    return {str(source or f"{host}: no file recorded"): str(host) for host, source in rows}
