"""`gpuenv fleet report`: many verify reports read, the nodes compared, the outliers named.

The service over three parts: the model (report_model), reading (report_reading: files and
folders, through the one verify report reader, in worker processes for many) and the comparison
(report_compare: robust statistics per group, failures by code).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuenv.errors import BadRequest
from gpuenv.fleet import stats
from gpuenv.fleet.history import gpu_events, report_count
from gpuenv.fleet.report_compare import compare, failures_by_code
from gpuenv.fleet.report_localisation import runs
from gpuenv.fleet.report_model import DEFAULT_CLOCK_SKEW_S, FleetReport, HostReport, Recorded
from gpuenv.fleet.report_reading import load, report_files, workers_for
from gpuenv.verify.cost import GroupCost, PriceRow, fleet_costs


@dataclass(frozen=True)
class ReportRequest:
    paths: tuple[Path, ...]
    rule: stats.Rule = field(default_factory=stats.Rule)
    min_hosts: int = stats.MIN_JUDGED  # a group is judged only with values from this many hosts
    history: Path | None = None  # record the reports in this GPU history, and read its events back
    prices: tuple[PriceRow, ...] = ()  # the config file's [prices]: what each kind of node costs per hour
    clock_skew_s: float = DEFAULT_CLOCK_SKEW_S  # a report dated further ahead of this clock is set aside
    strict: bool = False  # a warning, or a group not judged, fails the report


def fleet_report(request: ReportRequest) -> FleetReport:
    """The service: read (recording each report in the GPU history, when one is given), compare,
    and the typed result (exit 2 when no report was found)."""
    files = list(report_files(request.paths))  # first: a missing path is a bad request, before the history opens
    held = report_count(request.history) if request.history is not None else 0
    created = request.history is not None and not request.history.exists()
    with workers_for(len(files)) as pool:
        hosts, skipped, superseded = load(
            files, pool, history=request.history, costs=bool(request.prices), clock_skew_s=request.clock_skew_s
        )
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
            _recorded(request.history, held, created=created),
            request.strict,
            tuple(runs(hosts)),
        )


def _recorded(history: Path | None, held: int, *, created: bool) -> Recorded | None:
    """How many reports the history took (one it held already, by content, it did not take again)."""
    return None if history is None else Recorded(str(history), report_count(history) - held, created)


def _costs(hosts: list[HostReport], prices: tuple[PriceRow, ...]) -> tuple[GroupCost, ...]:
    """What each kind of node's work costs, from its certified hosts: a failing node's figures say
    nothing about what its kind delivers."""
    basis = [h.cost_basis for h in hosts if h.certified and h.cost_basis is not None]
    return tuple(fleet_costs(basis, prices)) if prices else ()
