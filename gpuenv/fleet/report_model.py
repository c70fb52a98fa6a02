"""The fleet report's model: each host's report as the comparison keeps it, groups, outliers, failures,
and the typed result with its JSON form (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, NamedTuple

from gpuenv.fleet import stats
from gpuenv.types import OUTCOMES
from gpuenv.verify import figures
from gpuenv.verify.cost import GroupCost, NodeFigures
from gpuenv.verify.expectations import Expected
from gpuenv.verify.figures import Better
from gpuenv.verify.reportfile import Skipped as Skipped

SCHEMA = "gpuenv.fleet-report/2"  # /2: healthy may be null (not judged); groups say what judged them
DEFAULT_CLOCK_SKEW_S = 300.0  # a report dated further ahead of the reading machine's clock is no real run
FUTURE_DATED = "future-dated report"  # the outcome of a host whose only reports are dated ahead of the clock
MAX_NAMED = 3  # groups named in a line before "and N more"
BUSBW = figures.Figure("allreduce", "busbw_gbps", "GB/s", "higher", per_gpu=False)


class Gpu(NamedTuple):  # a tuple: ten thousand reports make eighty thousand of them
    cuda_index: int | None  # in the report's process
    uuid: str | None = None
    serial: str | None = None
    name: str | None = None
    code: str | None = None  # its GPU code as --gpu spells it: "sm_90" (compute capability 9.0), "gfx942"

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.cuda_index, "uuid": self.uuid, "serial": self.serial}


class Series(NamedTuple):
    """One figure of one report: every GPU's value (or the node's, under None)."""

    figure: str  # registered name, e.g. "amp.matmul_tflops"
    values: Mapping[int | None, float]  # {CUDA index: value}; {None: value} for a per-node figure
    collective: str | None = None
    nbytes: int | None = None
    declared: figures.Figure | None = None  # a site check's figure, as its report declared it


def is_amd(gpu_model: str) -> bool:
    """Whether a host's GPU model (the name its report gives its GPUs, or `unknown AMD GPU`) is
    AMD's: an AMD host's problems take AMD's tools in their advice."""
    key = gpu_model.lower()
    return key.startswith(("amd", "unknown amd")) or "instinct" in key


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
    flags: tuple[str, ...] = ()  # what the reader doubts about this host (a report dated ahead of the clock)
    matmul_at: tuple[str, str] | None = None  # (dtype, shape) of the amp check's matmul_tflops
    localisation: tuple[str, dict[str, Any]] | None = None  # a run across nodes that localised: (job, its rounds)
    cpu_arch: str | None = None  # the report's host.cpu_arch ("aarch64"); None in reports written before it
    driver: str | None = None  # the loaded GPU driver, as the report found it
    os: str | None = None  # the report's host.os ("ubuntu22.04"); None: not recorded (older gpuenv, a container)
    python: str | None = None  # the report's host.python, the Python that ran verify on the host ("3.10")

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


@dataclass(frozen=True, slots=True)
class GroupKey:
    gpu_model: str
    gpu_count: int
    figure: str
    collective: str | None = None
    nbytes: int | None = None
    cpu_arch: str | None = None  # a GH200 node is not an H100 node's peer: the CPU is part of the group

    def metric(self) -> str:
        """The figure, with the collective and message size for bandwidth."""
        return f"{self.figure} {self.collective} {_size(self.nbytes)}" if self.collective else self.figure

    def label(self) -> str:
        cpu = f" ({self.cpu_arch})" if self.cpu_arch else ""
        return f"{self.gpu_count}x {self.gpu_model}{cpu} {self.metric()}"


Basis = Literal["peers", "expected"]  # what a group was judged against: its hosts' median, the model's figure


@dataclass(frozen=True)
class BelowExpected:
    """A value of a small group under what a healthy GPU of its model reaches (gpu-expectations.json)."""

    host: str
    gpu: Gpu | None  # None: a per-node figure (busbw)
    key: GroupKey
    unit: str
    value: float
    expected: Expected

    @property
    def severity(self) -> str:
        """fail under the figure's fail share (an estimate only warns), else warn."""
        return self.expected.verdict(self.value)

    @property
    def share(self) -> float:
        return self.value / self.expected.value

    def to_dict(self) -> dict[str, Any]:
        e = self.expected
        return {
            **_placed(self.host, self.gpu, self.key, self.unit),
            "value": self.value,
            "expected": e.value,
            "share": round(self.share, 3),
            "severity": self.severity,
            "model": e.model,
            "source": e.source,
            "confirmed": e.confirmed,
        }


def _placed(host: str, gpu: Gpu | None, key: GroupKey, unit: str) -> dict[str, Any]:
    """Where a judged value was seen: its host, GPU and group, as BelowExpected and Outlier say it."""
    return {
        "host": host,
        "gpu_index": gpu.cuda_index if gpu else None,
        "gpu_uuid": gpu.uuid if gpu else None,
        "gpu_serial": gpu.serial if gpu else None,
        "metric": key.figure,
        "collective": key.collective,
        "bytes": key.nbytes,
        "group": key.label(),
        "unit": unit,
    }


@dataclass(frozen=True)
class Group:
    key: GroupKey
    unit: str
    better: Better
    summary: stats.Summary
    hosts: int
    basis: Basis | None  # None: too few hosts and no expected figure: described, not judged
    note: str | None = None
    expected: Expected | None = None  # the model's figure a small group was judged against
    below: tuple[BelowExpected, ...] = ()  # its values under that figure

    @property
    def judged(self) -> bool:
        return self.basis is not None


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
            **_placed(self.host, self.gpu, self.key, self.unit),
            "value": self.value,
            "median": self.median,
            "z": round(self.z, 2),
        }


@dataclass(frozen=True)
class Failure:
    code: str
    hosts: tuple[tuple[str, tuple[Gpu, ...]], ...]  # (host, the GPUs findings named) per host


@dataclass(frozen=True)
class Recorded:
    """What one fleet report added to the GPU history: a report already there (same content) is not added."""

    path: str
    added: int
    created: bool = False  # this report made the file: the first time it says where it is

    def line(self) -> str:
        if self.created:
            return f"made the GPU history {self.path} and recorded {self.added} report(s) there (--no-history: none)"
        return f"recorded {self.added} new report(s) in the GPU history {self.path} (--no-history: none)"


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
    recorded: Recorded | None = None  # what reading added to the GPU history (None: no history)
    strict: bool = False  # a warning, or a group not judged, fails the report (exit 1)
    localisations: tuple[dict[str, Any], ...] = ()  # each run across nodes that localised, once (report_localisation)

    def outcomes(self) -> dict[str, int]:
        counts = Counter(h.outcome for h in self.hosts)
        return {o: counts.get(o, 0) for o in [*OUTCOMES, *sorted(set(counts) - set(OUTCOMES))]}

    @property
    def unreadable(self) -> tuple[Skipped, ...]:
        """Files that say they are gpuenv reports but could not be read: verdicts lost, never healthy."""
        return tuple(s for s in self.skipped if s.claimed)

    @property
    def below_expected(self) -> tuple[BelowExpected, ...]:
        return tuple(b for g in self.groups for b in g.below)

    @property
    def unjudged(self) -> tuple[Group, ...]:
        """Groups with neither enough hosts to judge by their median nor an expected figure."""
        return tuple(g for g in self.groups if not g.judged)

    @property
    def warnings(self) -> int:
        return sum(b.severity == "warn" for b in self.below_expected)

    @property
    def healthy(self) -> bool | None:
        """False when anything failed; None (not judged) when nothing failed but a group went
        unjudged: a fleet is never called healthy on figures nobody judged."""
        failed = (
            not all(h.certified and not h.flags for h in self.hosts)
            or self.outliers
            or self.unreadable
            or any(b.severity == "fail" for b in self.below_expected)
        )
        if failed:
            return False
        return None if self.unjudged else True

    @property
    def not_judged(self) -> str | None:
        """Why part of the fleet went unjudged (None: every group was judged)."""
        groups = self.unjudged
        if not groups:
            return None
        named = ", ".join(g.key.label() for g in groups[:MAX_NAMED])
        more = f" and {len(groups) - MAX_NAMED} more" if len(groups) > MAX_NAMED else ""
        return (
            f"{len(groups)} group(s) with values from fewer than {self.min_hosts} hosts and no expected "
            f"figure to judge them by: {named}{more}"
        )

    @property
    def exit_code(self) -> int:
        if self.healthy is False:
            return 1
        return 1 if self.strict and (self.healthy is None or self.warnings) else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "healthy": self.healthy,
            "judged": not self.unjudged,
            "not_judged": self.not_judged,
            "outcomes": self.outcomes(),
            "rule": {"z": self.rule.z, "min_deviation": self.rule.min_deviation, "min_hosts": self.min_hosts}
            | {"strict": self.strict},
            "hosts": [
                {"host": h.host, "outcome": h.outcome, "report": h.path, "started": h.started}
                | {"gpu_model": h.gpu_model, "gpu_count": h.gpu_count}
                | ({"flags": list(h.flags)} if h.flags else {})
                for h in self.hosts
            ],
            "skipped": [{"path": s.path, "reason": s.reason, "claims_report": s.claimed} for s in self.skipped],
            "superseded": self.superseded,
            "failures": [
                {"code": f.code, "hosts": [{"host": h, "gpus": [g.to_dict() for g in gpus]} for h, gpus in f.hosts]}
                for f in self.failures
            ],
            "groups": [_group_dict(g) for g in self.groups],
            "outliers": [o.to_dict() for o in self.outliers],
            "below_expected": [b.to_dict() for b in self.below_expected],
            "events": list(self.events),
            "costs": [c.to_dict() for c in self.costs],
            "localisations": list(self.localisations),
        }


def _group_dict(group: Group) -> dict[str, Any]:
    s = group.summary
    return {
        "gpu_model": group.key.gpu_model,
        "gpu_count": group.key.gpu_count,
        "cpu_arch": group.key.cpu_arch,
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
        "judged_against": group.basis,
        "expected": None if group.expected is None else _expected_dict(group.expected),
        "note": group.note,
    }


def _expected_dict(e: Expected) -> dict[str, Any]:
    return {"model": e.model, "what": e.what, "value": e.value, "source": e.source, "confirmed": e.confirmed}


def _size(nbytes: int | None) -> str:
    if nbytes is None:
        return ""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


@dataclass(frozen=True)
class RunSummary:
    """The outcome of every host of one `fleet verify` run (the file it writes beside the reports)."""

    path: str
    finished: str  # the file's modification time: the run wrote it at its end
    hosts: tuple[tuple[str, str, str | None], ...]  # (inventory name, outcome, its report's path)


Entry = HostReport | RunSummary | Skipped
