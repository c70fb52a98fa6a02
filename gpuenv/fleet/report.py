"""`gpuenv fleet report`: many verify reports read, the nodes compared, the outliers named.

Reports come from files or folders (every `*.json` below a folder); a file that is not a gpuenv
verify report (schema /1 or /2), or is corrupt, is named and skipped. Of each report only what
the comparison needs is kept (outcome, GPU identities, failing finding codes, figures), so ten
thousand reports fit in little memory. The figures compared are the ones registered in
gpuenv/verify/figures.py (per GPU: `{cuda index: value}`, mapped to UUID and serial through the
report's `host.gpus[].cuda_index`) and the collective bandwidth table of the allreduce check.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuenv.errors import BadRequest
from gpuenv.fleet import stats
from gpuenv.fleet.run import SCHEMA as FLEET_VERIFY
from gpuenv.fleet.run import SUMMARY_FILE
from gpuenv.verify import figures
from gpuenv.verify.figures import Better
from gpuenv.verify.model import NOT_CERTIFIED, readable

SCHEMA = "gpuenv.fleet-report/1"
REPORT_LIMIT = 64 << 20  # a verify report is tens of KiB; anything this big is not one
# Outcomes in the order they are tallied; `fleet verify` adds the last three for hosts it could not verify.
OUTCOMES = ("certified", "not certified", "could not run", "interrupted", "unreachable", "timeout", "not provisioned")
BUSBW = figures.Figure("allreduce", "busbw_gbps", "GB/s", "higher", per_gpu=False)
FAILING_STATUSES = NOT_CERTIFIED | {"error"}


@dataclass(frozen=True)
class ReportRequest:
    paths: tuple[Path, ...]
    rule: stats.Rule = field(default_factory=stats.Rule)
    min_hosts: int = stats.MIN_JUDGED  # a group is judged only with values from this many hosts
    history: Path | None = None  # record the reports in this GPU history, and read its events back


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int | None  # CUDA index in the report's process
    uuid: str | None = None
    serial: str | None = None
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "uuid": self.uuid, "serial": self.serial}


@dataclass(frozen=True, slots=True)
class Sample:
    figure: str  # registered name, e.g. "amp.matmul_tflops"
    value: float
    gpu_index: int | None  # None: a per-node figure
    collective: str | None = None
    nbytes: int | None = None


@dataclass(frozen=True, slots=True)
class HostReport:
    host: str
    path: str
    outcome: str
    started: str
    gpu_model: str
    gpu_count: int
    gpus: tuple[Gpu, ...]
    failures: tuple[tuple[str, Gpu | None], ...]  # (finding code, the GPU it names)
    samples: tuple[Sample, ...]
    matmul: tuple[tuple[str, str, int, float], ...] = ()  # (dtype, shape, cuda index, TFLOP/s), for baselines

    @property
    def certified(self) -> bool:
        return self.outcome == "certified"

    def gpu(self, cuda_index: int | None) -> Gpu:
        found = next((g for g in self.gpus if cuda_index is not None and g.index == cuda_index), None)
        return found or Gpu(cuda_index)


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class GroupKey:
    gpu_model: str
    gpu_count: int
    figure: str
    collective: str | None = None
    nbytes: int | None = None

    def metric(self) -> str:
        """The figure, with the collective and message size for bandwidth."""
        return f"{self.figure} {self.collective} {_size(self.nbytes)}" if self.collective else self.figure

    def label(self) -> str:
        return f"{self.gpu_count}x {self.gpu_model} {self.metric()}"


@dataclass(frozen=True)
class Group:
    key: GroupKey
    unit: str
    better: Better
    summary: stats.Summary
    hosts: int
    judged: bool
    note: str | None = None


@dataclass(frozen=True)
class Outlier:
    host: str
    gpu: Gpu | None  # None: a per-node figure (busbw)
    key: GroupKey
    unit: str
    value: float
    median: float
    z: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "gpu_index": self.gpu.index if self.gpu else None,
            "gpu_uuid": self.gpu.uuid if self.gpu else None,
            "gpu_serial": self.gpu.serial if self.gpu else None,
            "metric": self.key.figure,
            "collective": self.key.collective,
            "bytes": self.key.nbytes,
            "group": self.key.label(),
            "unit": self.unit,
            "value": self.value,
            "median": self.median,
            "z": round(self.z, 2),
        }


@dataclass(frozen=True)
class Failure:
    code: str
    hosts: tuple[tuple[str, tuple[Gpu, ...]], ...]  # (host, the GPUs findings named) per host


@dataclass(frozen=True)
class FleetReport:
    hosts: tuple[HostReport, ...]
    skipped: tuple[Skipped, ...]
    groups: tuple[Group, ...]
    failures: tuple[Failure, ...]
    outliers: tuple[Outlier, ...]
    rule: stats.Rule
    min_hosts: int
    superseded: int = 0  # older reports of a host, set aside for its latest
    events: tuple[dict[str, Any], ...] = field(default=())  # from the GPU history, when one is given

    def outcomes(self) -> dict[str, int]:
        counts = Counter(h.outcome for h in self.hosts)
        return {o: counts.get(o, 0) for o in [*OUTCOMES, *sorted(set(counts) - set(OUTCOMES))]}

    @property
    def healthy(self) -> bool:
        return all(h.certified for h in self.hosts) and not self.outliers

    @property
    def exit_code(self) -> int:
        return 0 if self.healthy else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "healthy": self.healthy,
            "outcomes": self.outcomes(),
            "rule": {"z": self.rule.z, "min_deviation": self.rule.min_deviation, "min_hosts": self.min_hosts},
            "hosts": [
                {"host": h.host, "outcome": h.outcome, "report": h.path, "started": h.started}
                | {"gpu_model": h.gpu_model, "gpu_count": h.gpu_count}
                for h in self.hosts
            ],
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "superseded": self.superseded,
            "failures": [
                {"code": f.code, "hosts": [{"host": h, "gpus": [g.to_dict() for g in gpus]} for h, gpus in f.hosts]}
                for f in self.failures
            ],
            "groups": [_group_dict(g) for g in self.groups],
            "outliers": [o.to_dict() for o in self.outliers],
            "events": list(self.events),
        }


def _group_dict(group: Group) -> dict[str, Any]:
    s = group.summary
    return {
        "gpu_model": group.key.gpu_model,
        "gpu_count": group.key.gpu_count,
        "metric": group.key.figure,
        "collective": group.key.collective,
        "bytes": group.key.nbytes,
        "unit": group.unit,
        "better": group.better,
        "n": s.n,
        "hosts": group.hosts,
        "median": s.median,
        "mad": s.mad,
        "p5": s.p5,
        "p95": s.p95,
        "judged": group.judged,
        "note": group.note,
    }


def _size(nbytes: int | None) -> str:
    if nbytes is None:
        return ""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


# ---- reading ----------------------------------------------------------------------------------


def report_files(paths: Iterable[Path]) -> Iterator[Path]:
    """Each file named, and every *.json below each folder named (sorted); a missing path is exit 2."""
    for path in paths:
        if path.is_dir():
            found = []
            for folder, dirs, files in os.walk(path):
                dirs.sort()
                found += [Path(folder, f) for f in files if f.endswith(".json")]
            yield from sorted(found)
        elif path.exists():
            yield path
        else:
            raise BadRequest(f"no such file or folder: {path}", hint="give report files or folders holding them")


# Called with each report read: its bytes, the parsed document, and what the comparison keeps of it.
OnReport = Callable[[bytes, dict[str, Any], "HostReport"], None]


def read_report(path: Path, on_report: OnReport | None = None) -> HostReport | Skipped:
    """One file as a host's report, or why it was skipped (never an exception for bad content)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(REPORT_LIMIT + 1)
    except OSError as exc:
        return Skipped(str(path), f"unreadable: {exc.strerror or exc}")
    if len(raw) > REPORT_LIMIT:
        return Skipped(str(path), f"larger than {REPORT_LIMIT >> 20} MiB: not a report")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return Skipped(str(path), f"corrupt: {str(exc)[:120]}")
    if not readable(data):
        return Skipped(str(path), "not a gpuenv verify report")
    try:
        entry = host_report(data, str(path))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return Skipped(str(path), f"corrupt: malformed {type(exc).__name__}: {str(exc)[:80]}")
    if on_report is not None:
        on_report(raw, data, entry)
    return entry


def host_report(data: dict[str, Any], path: str) -> HostReport:
    """What the comparison keeps of one parsed report."""
    host = data["host"]
    gpus = tuple(
        Gpu(g.get("cuda_index"), g.get("uuid"), g.get("serial"), g.get("name"))
        for g in host.get("gpus") or []
        if isinstance(g, dict)
    )
    cpu = data.get("device") == "cpu"
    names = Counter(g.name for g in gpus if g.name)
    model = "CPU" if cpu else names.most_common(1)[0][0] if names else "unknown GPU"
    checks = [c for c in data.get("checks") or [] if isinstance(c, dict)]
    return HostReport(
        host=str(host.get("hostname") or Path(path).stem),
        path=path,
        outcome=str((data.get("verdict") or {}).get("outcome") or "could not run"),
        started=str(data.get("started") or ""),
        gpu_model=model,
        gpu_count=0 if cpu else len(gpus),
        gpus=gpus,
        failures=tuple(_failures(checks, gpus)),
        samples=tuple(_samples(checks)),
        matmul=() if cpu else tuple(_matmul(checks)),
    )


def _failures(checks: list[dict[str, Any]], gpus: tuple[Gpu, ...]) -> Iterator[tuple[str, Gpu | None]]:
    """(code, GPU) of each failing finding; a failing check without one is named `<check>.<status>`."""
    for check in checks:
        named = False
        for f in check.get("findings") or []:
            if f.get("severity") == "fail":
                named = True
                yield str(f.get("code") or f"{check.get('name')}.fail"), _finding_gpu(f.get("gpu"), gpus)
        if not named and check.get("status") in FAILING_STATUSES:
            yield f"{check.get('name')}.{check.get('status')}", None


def _finding_gpu(ref: Any, gpus: tuple[Gpu, ...]) -> Gpu | None:
    """The report's GPU a finding names: by UUID (checks number GPUs by NVML or CUDA index)."""
    if not isinstance(ref, dict):
        return None
    uuid = ref.get("uuid")
    return next((g for g in gpus if uuid and g.uuid == uuid), None) or Gpu(ref.get("index"), uuid)


def _samples(checks: list[dict[str, Any]]) -> Iterator[Sample]:
    for reading in figures.readings(checks):
        yield Sample(reading.figure.name, reading.value, reading.gpu_index)
    for check in checks:
        if check.get("name") != BUSBW.check:
            continue
        for row in (check.get("metrics") or {}).get("sizes") or []:
            value = row.get("busbw_gbps")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                yield Sample(BUSBW.name, float(value), None, str(row["collective"]), int(row["bytes"]))


def _matmul(checks: list[dict[str, Any]]) -> Iterator[tuple[str, str, int, float]]:
    """The amp check's matmul TFLOP/s of every shape it ran, per GPU."""
    for check in checks:
        metrics = check.get("metrics") or {}
        if check.get("name") != "amp" or "matmul_dtype" not in metrics:
            continue
        by_shape = metrics.get("matmul_tflops_by_shape") or {metrics.get("matmul_shape"): metrics.get("matmul_tflops")}
        for shape, per_gpu in by_shape.items():
            for index, value in (per_gpu or {}).items():
                if shape and str(index).isdigit() and figures.is_number(value) and value > 0:
                    yield str(metrics["matmul_dtype"]), str(shape), int(index), float(value)


def load(paths: Iterable[Path], on_report: OnReport | None = None) -> tuple[list[HostReport], list[Skipped], int]:
    """Each host's latest report (by start time), the files skipped, and how many older reports of
    a host were set aside (a cron folder holds many runs per host; nodes compare by their latest)."""
    latest: dict[str, HostReport] = {}
    skipped: list[Skipped] = []
    unreported: dict[str, HostReport] = {}  # hosts fleet verify got no report from, by its summary
    read = 0
    for path in report_files(paths):
        entry = _fleet_summary(path) if path.name == SUMMARY_FILE else read_report(path, on_report)
        if isinstance(entry, list):
            unreported.update((h.host, h) for h in entry)
            continue
        if isinstance(entry, Skipped):
            skipped.append(entry)
            continue
        read += 1
        held = latest.get(entry.host)
        if held is None or _moment(entry.started) >= _moment(held.started):
            latest[entry.host] = entry
    missing = [h for name, h in unreported.items() if name not in latest]
    return [*latest.values(), *missing], skipped, read - len(latest)


def _fleet_summary(path: Path) -> list[HostReport] | Skipped:
    """The hosts a `fleet verify` summary (fleet-verify.json) names without a report: unreachable,
    timed out, not provisioned. They count with that outcome; the hosts with a report count by it."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(REPORT_LIMIT))
        rows = data["hosts"] if data.get("schema") == FLEET_VERIFY else None
        return (
            [
                HostReport(str(r["host"]), str(path), str(r["outcome"]), "", "-", 0, (), (), ())
                for r in rows or []
                if r.get("report") is None
            ]
            if rows is not None
            else Skipped(str(path), "not a gpuenv verify report")
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return Skipped(str(path), f"corrupt fleet verify summary: {str(exc)[:80]}")


def _moment(started: str) -> datetime:
    """A report's start as an aware datetime (naive means UTC); unreadable sorts first."""
    try:
        moment = datetime.fromisoformat(started.replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


# ---- comparing --------------------------------------------------------------------------------


def figure_of(name: str) -> figures.Figure:
    return BUSBW if name == BUSBW.name else figures.BY_NAME[name]


def grouped(hosts: Iterable[HostReport]) -> dict[GroupKey, list[tuple[int, Sample]]]:
    """Every sample under its group, with the index of its host."""
    groups: dict[GroupKey, list[tuple[int, Sample]]] = defaultdict(list)
    for i, host in enumerate(hosts):
        for s in host.samples:
            groups[GroupKey(host.gpu_model, host.gpu_count, s.figure, s.collective, s.nbytes)].append((i, s))
    return groups


def compare(hosts: list[HostReport], rule: stats.Rule, min_hosts: int) -> tuple[list[Group], list[Outlier]]:
    """Pure: the statistics of every group and the outliers of the groups large enough to judge."""
    groups: list[Group] = []
    outliers: list[Outlier] = []
    for key, members in sorted(grouped(hosts).items(), key=lambda kv: _sort_key(kv[0])):
        figure = figure_of(key.figure)
        summary = stats.summarize([s.value for _, s in members])
        n_hosts = len({i for i, _ in members})
        judged = n_hosts >= min_hosts
        note = None if judged else f"values from {n_hosts} host(s), under {min_hosts}: described, not judged"
        groups.append(Group(key, figure.unit, figure.better, summary, n_hosts, judged, note))
        if not judged:
            continue
        mad = stats.floored_mad(summary, mad_floor=figure.mad_floor, mad_floor_rel=figure.mad_floor_rel)
        for i, s in members:
            if stats.is_outlier(s.value, summary, mad, figure.better, rule):
                gpu = hosts[i].gpu(s.gpu_index) if s.gpu_index is not None else None
                z = stats.z_score(s.value, summary, mad)
                outliers.append(Outlier(hosts[i].host, gpu, key, figure.unit, s.value, summary.median, z))
    return groups, outliers


def _sort_key(key: GroupKey) -> tuple[str, int, str, str, int]:
    return (key.gpu_model, key.gpu_count, key.figure, key.collective or "", key.nbytes or 0)


def failures_by_code(hosts: Iterable[HostReport]) -> list[Failure]:
    """Failing finding codes, each with the hosts and the GPUs it named there (hosts in report order)."""
    by_code: dict[str, dict[str, list[Gpu]]] = defaultdict(dict)
    for host in hosts:
        for code, gpu in host.failures:
            gpus = by_code[code].setdefault(host.host, [])
            if gpu is not None and gpu not in gpus:
                gpus.append(gpu)
    return [
        Failure(code, tuple((h, tuple(g)) for h, g in per_host.items()))
        for code, per_host in sorted(by_code.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    ]


def fleet_report(request: ReportRequest) -> FleetReport:
    """The service: read, compare, and the typed result (exit 2 when no report was found)."""
    recorder = _Recorder()
    hosts, skipped, superseded = load(request.paths, recorder if request.history is not None else None)
    if not hosts:
        where = ", ".join(str(p) for p in request.paths)
        raise BadRequest(
            f"no gpuenv verify report in {where} ({len(skipped)} file(s) skipped)",
            hint="give the reports written by `gpuenv verify --report FILE` or `gpuenv fleet verify`",
        )
    groups, outliers = compare(hosts, request.rule, request.min_hosts)
    return FleetReport(
        tuple(hosts),
        tuple(skipped),
        tuple(groups),
        tuple(failures_by_code(hosts)),
        tuple(outliers),
        request.rule,
        request.min_hosts,
        superseded,
        recorder.ingest(request.history, hosts) if request.history is not None else (),
    )


class _Recorder:
    """What the GPU history keeps of each report read; ingested in one transaction at the end."""

    def __init__(self) -> None:
        from gpuenv.fleet.history import ReportRecord

        self.records: list[ReportRecord] = []

    def __call__(self, raw: bytes, data: dict[str, Any], entry: HostReport) -> None:
        from gpuenv.fleet.history import NotAReport, record_from_report

        try:
            self.records.append(record_from_report(data, raw=raw, host=entry.host, source=entry.path))
        except NotAReport:
            return  # compared, but nothing the history could key it by (an old report without a host name)

    def ingest(self, path: Path, hosts: list[HostReport]) -> tuple[dict[str, Any], ...]:
        """Record the reports, then the history's events for the GPUs of the hosts compared."""
        from gpuenv.fleet.history import gpu_events, ingest

        ingest(path, self.records)
        uuids = [g.uuid for h in hosts for g in h.gpus if g.uuid]
        return tuple(e.to_dict() for e in gpu_events(path, uuids))
