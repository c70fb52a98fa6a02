"""`gpuenv fleet report`: many verify reports read, the nodes compared, the outliers named.

Reports come from files or folders (every `*.json` below a folder); a file that is not a gpuenv
verify report (schema /1 or /2), or is corrupt, is named and skipped. Of each report only what
the comparison needs is kept (outcome, GPU identities, failing finding codes, figures), so ten
thousand reports fit in little memory. The figures compared are the ones registered in
gpuenv/verify/figures.py (per GPU: `{cuda index: value}`, mapped to UUID and serial through the
report's `host.gpus[].cuda_index`) and the collective bandwidth table of the allreduce check.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import stat
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor, Future
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from gpuenv.errors import BadRequest
from gpuenv.fleet import stats
from gpuenv.fleet.history import NotAReport, ReportRecord, gpu_events, ingest, record_from_report
from gpuenv.fleet.history import check as check_history
from gpuenv.verify import faults, figures
from gpuenv.verify.cost import GroupCost, NodeFigures, PriceRow, fleet_costs
from gpuenv.verify.figures import Better
from gpuenv.verify.model import NOT_CERTIFIED, readable

_loads: Callable[[bytes], Any] = json.loads
with suppress(ImportError):  # gpuenv[fast]: orjson parses reports about three times faster
    from orjson import loads as _loads

T = TypeVar("T")
R = TypeVar("R")
SCHEMA = "gpuenv.fleet-report/1"
REPORT_LIMIT = 64 << 20  # a verify report is tens of KiB; anything this big is not one
# Outcomes in the order they are tallied; `fleet verify` adds the last three for hosts it could not verify.
OUTCOMES = ("certified", "not certified", "could not run", "interrupted", "unreachable", "timeout", "not provisioned")
BUSBW = figures.Figure("allreduce", "busbw_gbps", "GB/s", "higher", per_gpu=False)
FAILING_STATUSES = NOT_CERTIFIED | {"error"}
FLEET_VERIFY_SCHEMA = "gpuenv.fleet-verify/1"  # the outcomes `fleet verify` writes beside its reports
FAULT_NAME = "fleet-read"  # GPUENV_TEST_FAULT=fleet-read:hang, for gpuenv's own tests: a reader stuck on a file


@dataclass(frozen=True)
class ReportRequest:
    paths: tuple[Path, ...]
    rule: stats.Rule = field(default_factory=stats.Rule)
    min_hosts: int = stats.MIN_JUDGED  # a group is judged only with values from this many hosts
    history: Path | None = None  # record the reports in this GPU history, and read its events back
    prices: tuple[PriceRow, ...] = ()  # the config file's [prices]: what each kind of node costs per hour


class Gpu(NamedTuple):  # a tuple: ten thousand reports make eighty thousand of them
    cuda_index: int | None  # in the report's process
    uuid: str | None = None
    serial: str | None = None
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.cuda_index, "uuid": self.uuid, "serial": self.serial}


class Series(NamedTuple):
    """One figure of one report: every GPU's value (or the node's, under None)."""

    figure: str  # registered name, e.g. "amp.matmul_tflops"
    values: Mapping[int | None, float]  # {CUDA index: value}; {None: value} for a per-node figure
    collective: str | None = None
    nbytes: int | None = None


Member = tuple[int, int | None, float]  # a value in a group: (host's position, CUDA index, value)


@dataclass(frozen=True, slots=True)
class HostReport:
    host: str
    path: str
    outcome: str
    started: str
    gpu_model: str
    gpu_count: int
    gpus: tuple[Gpu, ...]  # the report's host.gpus
    failures: tuple[tuple[str, Gpu | None], ...]  # (finding code, the GPU it names)
    series: tuple[Series, ...]
    matmul: tuple[tuple[str, str, int, float], ...] = ()  # (dtype, shape, cuda index, TFLOP/s), for baselines
    cost_basis: NodeFigures | None = None  # the throughput figures costs come from (read with [prices] only)

    @property
    def certified(self) -> bool:
        return self.outcome == "certified"

    def gpu(self, cuda_index: int | None) -> Gpu:
        found = next((g for g in self.gpus if cuda_index is not None and g.cuda_index == cuda_index), None)
        return found or Gpu(cuda_index)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its GPUs and series as plain tuples: a reader process hands back thousands of
        reports, and named tuples pickle several times slower (a Python call each)."""
        fields = [getattr(self, f) for f in self.__slots__]
        fields[6], fields[8] = tuple(map(tuple, self.gpus)), tuple(map(tuple, self.series))
        return _unpickled, tuple(fields)


def _unpickled(*fields: Any) -> HostReport:
    values = list(fields)
    values[6], values[8] = tuple(map(_as_gpu, fields[6])), tuple(map(_as_series, fields[8]))
    return HostReport(*values)


_as_gpu, _as_series = partial(tuple.__new__, Gpu), partial(tuple.__new__, Series)  # no Python call per tuple


def _gpu(entry: dict[str, Any]) -> Gpu:
    return Gpu(entry.get("cuda_index"), entry.get("uuid"), entry.get("serial"), entry.get("name"))


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
            "gpu_index": self.gpu.cuda_index if self.gpu else None,
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
    costs: tuple[GroupCost, ...] = ()  # per node kind, over the certified hosts (with [prices] only)

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
            "costs": [c.to_dict() for c in self.costs],
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


def report_files(paths: Iterable[Path]) -> Iterator[str]:
    """Each file named, and every *.json below each folder named (sorted); a missing path is exit 2."""
    for path in paths:
        if path.is_dir():
            found: list[str] = []
            for folder, _, files in os.walk(path):
                found += [os.path.join(folder, f) for f in files if f.endswith(".json")]
            yield from sorted(found)
        elif path.exists():
            yield str(path)
        else:
            raise BadRequest(f"no such file or folder: {path}", hint="give report files or folders holding them")


@dataclass(frozen=True)
class RunSummary:
    """The outcome of every host of one `fleet verify` run (the file it writes beside the reports)."""

    path: str
    finished: str  # the file's modification time: the run wrote it at its end
    hosts: tuple[tuple[str, str, str | None], ...]  # (inventory name, outcome, its report's path)


Entry = HostReport | RunSummary | Skipped


def read_report(path: str | Path, *, matmul: bool = False, costs: bool = False) -> Entry:
    """One file as a host's report, a fleet verify summary, or why it was skipped (never an
    exception for bad content)."""
    return read_files([str(path)], matmul=matmul, costs=costs)[0]


def read_files(
    paths: list[str], *, history: Path | None = None, matmul: bool = False, costs: bool = False
) -> list[Entry]:
    """Each file read (see read_report); with a history, every report among them recorded there
    (in one transaction)."""
    faults.inject(FAULT_NAME)
    entries: list[Entry] = []
    records: list[ReportRecord] = []
    for path in paths:
        raw = _raw(path)
        if isinstance(raw, Skipped):
            entries.append(raw)
            continue
        data = _parsed(raw, path)
        entry = data if isinstance(data, Skipped) else _entry(data, path, matmul=matmul, costs=costs)
        entries.append(entry)
        # a report without a host name is compared, but the history has nothing to key it by
        if history is not None and isinstance(entry, HostReport):
            with suppress(NotAReport):
                records.append(record_from_report(data, raw=raw, host=entry.host, source=entry.path))
    if history is not None and records:
        ingest(history, records)
    return entries


def _raw(path: str) -> bytes | Skipped:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO among the reports must not block the read
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return Skipped(path, "not a regular file")
            raw = os.read(fd, min(info.st_size, REPORT_LIMIT) + 1)  # the whole file, in one call
            while info.st_size < len(raw) <= REPORT_LIMIT and (more := os.read(fd, 1 << 16)):
                raw += more  # it grew since fstat
        finally:
            os.close(fd)
    except OSError as exc:
        return Skipped(path, f"unreadable: {exc.strerror or exc}")
    return Skipped(path, f"larger than {REPORT_LIMIT >> 20} MiB: not a report") if len(raw) > REPORT_LIMIT else raw


def _parsed(raw: bytes, path: str) -> Any:
    if _loads is not json.loads:
        with suppress(ValueError):  # orjson refuses what json reads (NaN, integers past 64 bits): json decides
            return _loads(raw)
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return Skipped(path, f"corrupt: {str(exc)[:120]}")


def _entry(data: Any, path: str, *, matmul: bool, costs: bool) -> Entry:
    try:
        if isinstance(data, dict) and data.get("schema") == FLEET_VERIFY_SCHEMA:
            return run_summary(data, path)
        if not readable(data):
            return Skipped(path, "not a gpuenv verify report")
        return host_report(data, path, matmul=matmul, costs=costs)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return Skipped(path, f"corrupt: malformed {type(exc).__name__}: {str(exc)[:80]}")


def run_summary(data: dict[str, Any], path: str | Path) -> RunSummary:
    finished = datetime.fromtimestamp(os.stat(path).st_mtime, timezone.utc).isoformat()
    rows = tuple((str(r["host"]), str(r["outcome"]), r.get("report")) for r in data["hosts"])
    return RunSummary(str(path), finished, rows)


def host_report(data: dict[str, Any], path: str, *, matmul: bool = False, costs: bool = False) -> HostReport:
    """What the comparison keeps of one parsed report (with matmul: every shape's TFLOP/s, for baselines;
    with costs: the figures a cost is computed from)."""
    host = data["host"]
    gpus = tuple(_gpu(g) for g in host.get("gpus") or [] if isinstance(g, dict))
    cpu = data.get("device") == "cpu"
    checks = [c for c in data.get("checks") or [] if isinstance(c, dict)]
    return HostReport(
        host=str(host.get("hostname") or Path(path).stem),
        path=path,
        outcome=str((data.get("verdict") or {}).get("outcome") or "could not run"),
        started=str(data.get("started") or ""),
        gpu_model="CPU" if cpu else _model(gpus),
        gpu_count=0 if cpu else len(gpus),
        gpus=gpus,
        failures=tuple(_failures(checks, gpus)),
        series=tuple(_series(checks)),
        matmul=tuple(_matmul(checks)) if matmul and not cpu else (),
        cost_basis=NodeFigures.from_report(data) if costs else None,
    )


def _model(gpus: tuple[Gpu, ...]) -> str:
    """The node's GPU model: the name most of its GPUs have."""
    names = [str(g.name) for g in gpus if g.name]
    if not names:
        return "unknown GPU"
    if names.count(names[0]) == len(names):
        return names[0]
    return Counter(names).most_common(1)[0][0]


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


def _series(checks: list[dict[str, Any]]) -> Iterator[Series]:
    for figure, values in figures.series(checks):
        yield Series(figure.name, values)
    for check in checks:
        if check.get("name") != BUSBW.check:
            continue
        for row in (check.get("metrics") or {}).get("sizes") or []:
            value = row.get("busbw_gbps")
            if figures.is_number(value) and value > 0:
                yield Series(BUSBW.name, {None: float(value)}, str(row["collective"]), int(row["bytes"]))


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


PARALLEL_FROM = 1024  # reports: about where starting workers begins to pay (measured with a history)
MAX_WORKERS = 8
SHARES_PER_WORKER = 4  # small enough to even out the workers' ends, large enough to record few times


def load(
    files: list[str], pool: Executor, *, history: Path | None = None, matmul: bool = False, costs: bool = False
) -> tuple[list[HostReport], list[Skipped], int]:
    """Each host's latest report (by start time), the files skipped, and how many older reports of
    a host were set aside (a cron folder holds many runs per host; nodes compare by their latest).
    With a history, every report read is recorded there. The files are read in shares by the pool."""
    faults.check_setting()
    if history is not None:
        check_history(history)  # made, or found unusable, before any worker opens it
    size = max(1, -(-len(files) // (_cpus() * SHARES_PER_WORKER)))
    shares = [files[i : i + size] for i in range(0, len(files), size)]
    with _no_cycle_collection():
        read = partial(read_files, history=history, matmul=matmul, costs=costs)
        entries = [e for share in results(pool, read, shares) for e in share]
    reports = with_run_outcomes(
        [e for e in entries if isinstance(e, HostReport)], [e for e in entries if isinstance(e, RunSummary)]
    )
    latest: dict[str, HostReport] = {}
    for entry in reports:
        held = latest.get(entry.host)
        if held is None or _moment(entry.started) >= _moment(held.started):
            latest[entry.host] = entry
    skipped = [e for e in entries if isinstance(e, Skipped)]
    return list(latest.values()), skipped, len(reports) - len(latest)


@contextmanager
def workers_for(files: int) -> Iterator[Executor]:
    """Where reports are read: for many, one worker process per CPU this process may use (parsing
    is most of the time); for few, or off Linux (no fork there), this process. Interrupted, the
    workers are stopped, even one stuck reading a file."""
    workers = _cpus() if files >= PARALLEL_FROM else 1
    if workers < 2:
        yield InProcess()
        return
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import active_children, get_context

    others = set(active_children())
    # fork: the workers start at once with gpuenv imported (the process has no threads yet)
    pool = ProcessPoolExecutor(workers, mp_context=get_context("fork"), initializer=_worker_started)
    try:
        yield pool
    except BaseException:
        for worker in set(active_children()) - others:  # the pool's
            worker.terminate()
        raise
    finally:
        pool.shutdown()  # cancelling nothing: see results()


def results(pool: Executor, fn: Callable[[T], R], items: list[T]) -> list[R]:
    """fn of every item, run by the pool. Not Executor.map: interrupted, it cancels the calls not
    yet started, and a process pool broken after that (its workers stopped) fails setting their
    futures, printing a traceback from its thread (CPython 3.11)."""
    futures = [pool.submit(fn, item) for item in items]
    return [future.result() for future in futures]


def _cpus() -> int:
    """The worker processes to read with: the CPUs this process may use (at most MAX_WORKERS); 1 off Linux."""
    return min(len(os.sched_getaffinity(0)), MAX_WORKERS) if hasattr(os, "sched_getaffinity") else 1


def _worker_started() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # how the parent stops a worker
    gc.disable()  # a worker keeps nothing between shares, and builds no cycles (see _no_cycle_collection)


class InProcess(Executor):
    """An executor that runs each call at once, in this process."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # handed over by the future, as a worker's would be
            future.set_exception(exc)
        return future


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Reading builds many small objects and no cycles: the cycle collector would only rescan
    the growing set of kept ones (a third of the time over ten thousand reports). At the end they
    are frozen (left out of later collections) rather than handed to the collector all at once."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def with_run_outcomes(reports: list[HostReport], summaries: list[RunSummary]) -> list[HostReport]:
    """Reports named by their inventory name where a fleet verify summary lists them, and a
    figure-less entry for each host it lists without a report (unreachable, timeout, not provisioned)."""
    if not summaries:
        return reports
    by_path = {os.path.realpath(r.path): i for i, r in enumerate(reports)}
    out = list(reports)
    for summary in summaries:
        for host, outcome, report in summary.hosts:
            i = _report_index(by_path, summary.path, report)
            if i is not None:
                out[i] = replace(out[i], host=host)
            else:
                out.append(HostReport(host, summary.path, outcome, summary.finished, "-", 0, (), (), ()))
    return out


def _report_index(by_path: dict[str, int], summary: str, report: str | None) -> int | None:
    """The report a summary row names: its path as fleet verify wrote it, else the same file
    beside the summary (the folder may have been copied, or be read from another directory)."""
    if not report:
        return None
    found = by_path.get(os.path.realpath(report))
    return found if found is not None else by_path.get(os.path.realpath(Path(summary).parent / Path(report).name))


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


@dataclass
class Pool:
    """A group's values (in one list, for the statistics) and the series they came from."""

    values: list[float] = field(default_factory=list)
    series: list[tuple[int, Series]] = field(default_factory=list)  # (host's position, its series)

    def members(self) -> Iterator[Member]:
        for i, s in self.series:
            for gpu, value in s.values.items():
                yield i, gpu, value

    def hosts(self) -> int:
        return len({i for i, _ in self.series})

    def beyond(self, limit: float, better: Better) -> Iterator[Member]:
        """The values past limit on the bad side (a series entirely within it is skipped whole)."""
        higher = better == "higher"
        for i, s in self.series:
            if (min(s.values.values()) < limit) if higher else (max(s.values.values()) > limit):
                for gpu, value in s.values.items():
                    if value < limit if higher else value > limit:
                        yield i, gpu, value


def grouped(hosts: Iterable[HostReport]) -> dict[GroupKey, Pool]:
    """Every series under its group (GPU model x count x figure x collective x size)."""
    pools: dict[tuple[str, int, str, str | None, int | None], Pool] = defaultdict(Pool)
    for i, host in enumerate(hosts):
        for s in host.series:
            pool = pools[(host.gpu_model, host.gpu_count, s.figure, s.collective, s.nbytes)]
            pool.values.extend(s.values.values())
            pool.series.append((i, s))
    return {GroupKey(*key): pool for key, pool in pools.items()}


def compare(hosts: list[HostReport], rule: stats.Rule, min_hosts: int) -> tuple[list[Group], list[Outlier]]:
    """Pure: the statistics of every group and the outliers of the groups large enough to judge."""
    groups: list[Group] = []
    outliers: list[Outlier] = []
    for key, pool in sorted(grouped(hosts).items(), key=lambda kv: _sort_key(kv[0])):
        figure = figure_of(key.figure)
        summary = stats.summarize(pool.values)
        n_hosts = pool.hosts()
        judged = n_hosts >= min_hosts
        note = None if judged else f"values from {n_hosts} host(s), under {min_hosts}: described, not judged"
        groups.append(Group(key, figure.unit, figure.better, summary, n_hosts, judged, note))
        if not judged:
            continue
        mad = stats.floored_mad(summary, mad_floor=figure.mad_floor, mad_floor_rel=figure.mad_floor_rel)
        if not stats.is_outlier(summary.worst(figure.better), summary, mad, figure.better, rule):
            continue
        for i, gpu_index, value in pool.beyond(stats.threshold(summary, mad, figure.better, rule), figure.better):
            gpu = hosts[i].gpu(gpu_index) if gpu_index is not None else None
            z = stats.z_score(value, summary, mad)
            outliers.append(Outlier(hosts[i].host, gpu, key, figure.unit, value, summary.median, z))
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
    """The service: read (recording each report in the GPU history, when one is given), compare,
    and the typed result (exit 2 when no report was found)."""
    files = list(report_files(request.paths))  # first: a missing path is a bad request, before the history opens
    with workers_for(len(files)) as pool:
        hosts, skipped, superseded = load(files, pool, history=request.history, costs=bool(request.prices))
        if not hosts:
            where = ", ".join(str(p) for p in request.paths)
            raise BadRequest(
                f"no gpuenv verify report in {where} ({len(skipped)} file(s) skipped)",
                hint="give the reports written by `gpuenv verify --report FILE` or `gpuenv fleet verify`",
            )
        uuids = [g.uuid for h in hosts for g in h.gpus if g.uuid]
        events = pool.submit(gpu_events, request.history, uuids) if request.history is not None else None
        groups, outliers = compare(hosts, request.rule, request.min_hosts)  # while a worker reads the history
        return FleetReport(
            tuple(hosts),
            tuple(skipped),
            tuple(groups),
            tuple(failures_by_code(hosts)),
            tuple(outliers),
            request.rule,
            request.min_hosts,
            superseded,
            tuple(e.to_dict() for e in events.result()) if events is not None else (),
            _costs(hosts, request.prices),
        )


def _costs(hosts: list[HostReport], prices: tuple[PriceRow, ...]) -> tuple[GroupCost, ...]:
    """What each kind of node's work costs, from its certified hosts: a failing node's figures say
    nothing about what its kind delivers."""
    basis = [h.cost_basis for h in hosts if h.certified and h.cost_basis is not None]
    return tuple(fleet_costs(basis, prices)) if prices else ()
