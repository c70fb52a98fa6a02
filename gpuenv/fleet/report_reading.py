"""Reading many verify reports for the fleet report: files or folders (every `*.json` below a folder).

Each file is read once, through gpuenv.verify.reportfile; one that is not a gpuenv verify report
(schema /1 or /2), or is corrupt, is named and skipped. Of each report only what the comparison
needs is kept (outcome, GPU identities, failing finding codes, figures), so ten thousand reports
fit in little memory. The figures kept are the ones registered in gpuenv/verify/figures.py (per
GPU: `{cuda index: value}`, mapped to UUID and serial through the report's `host.gpus[].cuda_index`)
and the collective bandwidth table of the allreduce check. Many files are read in shares by worker
processes (gpuenv.parallel).
"""

from __future__ import annotations

import gc
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

from gpuenv import parallel
from gpuenv.errors import BadRequest
from gpuenv.fleet.history import check as check_history
from gpuenv.fleet.history import ingest
from gpuenv.fleet.history_records import NotAReport, ReportRecord, record_from_report
from gpuenv.fleet.report_model import (
    BUSBW,
    DEFAULT_CLOCK_SKEW_S,
    FUTURE_DATED,
    Entry,
    Gpu,
    HostReport,
    RunSummary,
    Series,
    Skipped,
)
from gpuenv.platforms.arch import arch_name
from gpuenv.verify import faults, figures, reportfile
from gpuenv.verify.cost import NodeFigures
from gpuenv.verify.model import NOT_CERTIFIED
from gpuenv.verify.reportfile import Check, FleetVerifySummary, ReportFile, VerifyReport

FAILING_STATUSES = NOT_CERTIFIED | {"error"}
FAULT_NAME = "fleet-read"  # GPUENV_TEST_FAULT=fleet-read:hang, for gpuenv's own tests: a reader stuck on a file
PARALLEL_FROM = 1024  # reports: about where starting workers begins to pay (measured with a history)
MAX_WORKERS = 8
SHARES_PER_WORKER = 4  # small enough to even out the workers' ends, large enough to record few times


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
        found = reportfile.read(path)
        entry = entry_of(found, matmul=matmul, costs=costs)
        entries.append(entry)
        # a report without a host name is compared, but the history has nothing to key it by
        if history is not None and isinstance(entry, HostReport) and isinstance(found, ReportFile):
            assert isinstance(found.document, VerifyReport)  # what a HostReport is made of
            with suppress(NotAReport):
                records.append(record_from_report(found.document, raw=found.raw, host=entry.host, source=entry.path))
    if history is not None and records:
        ingest(history, records)
    return entries


def entry_of(found: ReportFile | Skipped, *, matmul: bool = False, costs: bool = False) -> Entry:
    """What the fleet report keeps of a file read: a host's report, a fleet verify summary, or why it was skipped."""
    if isinstance(found, Skipped):
        return found
    if isinstance(found.document, FleetVerifySummary):
        return run_summary(found.document, found)
    try:
        return host_report(found.document, found.path, matmul=matmul, costs=costs)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # the checks' metrics are open objects
        return Skipped(found.path, f"corrupt: malformed {type(exc).__name__}: {str(exc)[:80]}", claimed=True)
    except RecursionError:
        return Skipped(found.path, reportfile.TOO_DEEP, claimed=True)


def run_summary(summary: FleetVerifySummary, found: ReportFile) -> RunSummary:
    finished = datetime.fromtimestamp(found.mtime, timezone.utc).isoformat()
    return RunSummary(found.path, finished, tuple((r.host, r.outcome, r.report) for r in summary.hosts))


def host_report(report: VerifyReport, path: str, *, matmul: bool = False, costs: bool = False) -> HostReport:
    """What the comparison keeps of one report (with matmul: every shape's TFLOP/s, for baselines;
    with costs: the figures a cost is computed from)."""
    gpus = tuple(Gpu(g.cuda_index, g.uuid, g.serial, g.name, _code(g)) for g in report.host.gpus)
    cpu = report.device == "cpu"
    plain = [c.plain() for c in report.checks]  # what figures reads
    return HostReport(
        host=report.host.hostname or Path(path).stem,
        path=path,
        outcome=report.verdict.outcome if report.verdict is not None else "could not run",
        started=report.started,
        gpu_model="CPU" if cpu else _model(gpus, amd=_read_by_amd_smi(report.checks)),
        gpu_count=0 if cpu else len(gpus),
        gpus=gpus,
        failures=tuple(_failures(report.checks, gpus)),
        series=tuple(_series(plain)),
        matmul=tuple(_matmul(report.checks)) if matmul and not cpu else (),
        cost_basis=_cost_basis(report, plain) if costs else None,
        matmul_at=_matmul_at(report.checks),
        localisation=_localisation(report.multi_node),
        driver=report.stack.driver or _read_driver(report.checks),
        cpu_arch=arch_name(report.host.cpu_arch) if report.host.cpu_arch else None,  # arm64 is aarch64's peer
        os=report.host.os,
        python=report.host.python,
    )


def _code(gpu: reportfile.HostGpu) -> str | None:
    """The GPU's code as --gpu spells it: its compute capability as sm_NN, else its gfx target."""
    cc = gpu.compute_capability
    return f"sm_{cc.replace('.', '')}" if cc else gpu.gfx


def _read_driver(checks: tuple[Check, ...]) -> str | None:
    """The driver a check read (the health check does at every level; the stack check runs from standard)."""
    return next((d for c in checks if isinstance(d := c.metrics.get("driver"), str)), None)


def _localisation(multi: reportfile.MultiNode | None) -> tuple[str, dict[str, Any]] | None:
    """A run across nodes that localised: (its job, the localisation), as every node of it reports."""
    if multi is None or not multi.localisation or not multi.localisation.get("ran"):
        return None
    return multi.job or "", multi.localisation


def _model(gpus: tuple[Gpu, ...], *, amd: bool = False) -> str:
    """The node's GPU model: the name most of its GPUs have (AMD's market name, "AMD Instinct
    MI300X", is never NVIDIA's, so a mixed fleet compares like with like); a node whose GPUs have
    no name is an unknown GPU of its vendor, never grouped with the other vendor's."""
    names = [str(g.name) for g in gpus if g.name]
    if not names:
        return "unknown AMD GPU" if amd else "unknown GPU"
    if names.count(names[0]) == len(names):
        return names[0]
    return Counter(names).most_common(1)[0][0]


def _read_by_amd_smi(checks: tuple[Check, ...]) -> bool:
    """Whether the nvml check read the GPUs through AMD SMI (an AMD node)."""
    return any(c.name == "nvml" and c.metrics.get("smi") == "amdsmi" for c in checks)


def _failures(checks: tuple[Check, ...], gpus: tuple[Gpu, ...]) -> Iterator[tuple[str, Gpu | None]]:
    """(code, GPU) of each failing finding; a failing check without one is named `<check>.<status>`."""
    for check in checks:
        named = False
        for f in check.findings:
            if f.severity == "fail":
                named = True
                yield f.code or f"{check.name}.fail", _finding_gpu(f.gpu, gpus)
        if not named and check.status in FAILING_STATUSES:
            yield f"{check.name}.{check.status}", None


def _finding_gpu(ref: reportfile.FindingGpu | None, gpus: tuple[Gpu, ...]) -> Gpu | None:
    """The report's GPU a finding names: by UUID (checks number GPUs by NVML or CUDA index)."""
    if ref is None:
        return None
    uuid = ref.uuid
    return next((g for g in gpus if uuid and g.uuid == uuid), None) or Gpu(ref.index, uuid)


def _series(checks: list[dict[str, Any]]) -> Iterator[Series]:
    for figure, values in figures.series(checks):
        registered = figure.name in figures.BY_NAME
        yield Series(figure.name, values) if registered else Series(figure.name, values, declared=figure)
    for check in checks:
        if check["name"] != BUSBW.check:
            continue
        for row in check["metrics"].get("sizes") or []:
            value = row.get("busbw_gbps")
            if figures.is_number(value) and value > 0:
                yield Series(BUSBW.name, {None: float(value)}, str(row["collective"]), int(row["bytes"]))


def _matmul(checks: tuple[Check, ...]) -> Iterator[tuple[str, str, int, float]]:
    """The amp check's matmul TFLOP/s of every shape it ran, per GPU."""
    for check in checks:
        metrics = check.metrics
        if check.name != "amp" or "matmul_dtype" not in metrics:
            continue
        by_shape = metrics.get("matmul_tflops_by_shape") or {metrics.get("matmul_shape"): metrics.get("matmul_tflops")}
        for shape, per_gpu in by_shape.items():
            for index, value in (per_gpu or {}).items():
                if shape and str(index).isdigit() and figures.is_number(value) and value > 0:
                    yield str(metrics["matmul_dtype"]), str(shape), int(index), float(value)


def _matmul_at(checks: tuple[Check, ...]) -> tuple[str, str] | None:
    """The dtype and shape the amp check's matmul_tflops were measured at (what an expected rate is for)."""
    amp = next((c.metrics for c in checks if c.name == "amp"), {})
    dtype, shape = amp.get("matmul_dtype"), amp.get("matmul_shape")
    return (dtype, shape) if isinstance(dtype, str) and isinstance(shape, str) else None


def _cost_basis(report: VerifyReport, checks: list[dict[str, Any]]) -> NodeFigures:
    """The node's kind and throughput figures, as NodeFigures.from_report reads them from a report's JSON."""
    names = tuple(g.name or "unknown GPU" for g in report.host.gpus)
    return NodeFigures(report.host.instance_type or None, names, tuple(figures.readings(checks)))


def load(
    files: list[str],
    pool: Executor,
    *,
    history: Path | None = None,
    matmul: bool = False,
    costs: bool = False,
    clock_skew_s: float = DEFAULT_CLOCK_SKEW_S,
) -> tuple[list[HostReport], list[Skipped], int]:
    """Each host's latest report (by start time; one dated ahead of this machine's clock by more than
    clock_skew_s is flagged and never preferred), the files skipped, and how many older reports of
    a host were set aside (a cron folder holds many runs per host; nodes compare by their latest).
    With a history, every report read is recorded there. The files are read in shares by the pool."""
    faults.check_setting()
    if history is not None:
        check_history(history)  # made, or found unusable, before any worker opens it
    size = max(1, -(-len(files) // (parallel.cpus(MAX_WORKERS) * SHARES_PER_WORKER)))
    shares = [files[i : i + size] for i in range(0, len(files), size)]
    with _no_cycle_collection():
        read = partial(read_files, history=history, matmul=matmul, costs=costs)
        entries = [e for share in parallel.results(pool, read, shares) for e in share]
    reports = with_run_outcomes(
        [e for e in entries if isinstance(e, HostReport)], [e for e in entries if isinstance(e, RunSummary)]
    )
    latest = latest_per_host(reports, datetime.now(timezone.utc) + timedelta(seconds=clock_skew_s))
    skipped = [e for e in entries if isinstance(e, Skipped)]
    return latest, skipped, len(reports) - len(latest)


def latest_per_host(reports: list[HostReport], horizon: datetime) -> list[HostReport]:
    """Each host's latest report by start time. A report started after `horizon` (the reading machine's
    clock plus the skew allowed) cannot be a real run: it never wins over a report dated in time, and
    the host carries a flag naming it; a host with only such reports keeps the latest, as FUTURE_DATED."""
    latest: dict[str, HostReport] = {}
    ahead: dict[str, HostReport] = {}
    for entry in reports:
        moment = _moment(entry.started)
        chosen = ahead if moment > horizon else latest
        held = chosen.get(entry.host)
        if held is None or moment >= _moment(held.started):
            chosen[entry.host] = entry
    for host, future in ahead.items():
        flag = f"report {future.path} is dated {future.started}, ahead of this machine's clock: set aside"
        kept = latest.get(host) or replace(future, outcome=FUTURE_DATED)
        latest[host] = replace(kept, flags=(*kept.flags, flag))
    return list(latest.values())


def workers_for(files: int) -> AbstractContextManager[Executor]:
    """Where reports are read: for many, one worker process per CPU this process may use (parsing
    is most of the time); for few, or off Linux (no fork there), this process. Interrupted, the
    workers are stopped, even one stuck reading a file. A worker keeps nothing between shares and
    builds no cycles: its cycle collector stays off (see _no_cycle_collection)."""
    return parallel.workers(files, parallel_from=PARALLEL_FROM, most=MAX_WORKERS, started=gc.disable)


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
