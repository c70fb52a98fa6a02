"""The fleet report's comparison (pure): every figure grouped by GPU model, GPU count and figure,
described, and judged: for outliers against the group's median where enough hosts give values,
else against the GPU model's expected figure (gpu-expectations.json, the absolute floors verify
judges a node by), else not at all, and said so; failing findings by code."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from gpuenv.fleet import stats
from gpuenv.fleet.report_model import (
    BUSBW,
    BelowExpected,
    Failure,
    Gpu,
    Group,
    GroupKey,
    HostReport,
    Member,
    Outlier,
    Series,
)
from gpuenv.verify import figures
from gpuenv.verify.expectations import SATURATES, Expectations, Expected, load_expectations
from gpuenv.verify.figures import Better

MATMUL = "amp.matmul_tflops"


def figure_of(name: str) -> figures.Figure:
    return BUSBW if name == BUSBW.name else figures.BY_NAME[name]


def pool_figure(name: str, pool: Pool) -> tuple[figures.Figure, str | None]:
    """The group's figure: registered, or as its hosts' reports declared it (a site check's); a
    note when they declared it differently (another unit or direction: nothing to compare)."""
    declared = {s.declared for _, s in pool.series if s.declared is not None}
    if not declared:
        return figure_of(name), None
    first = min(declared, key=lambda f: (f.unit, f.better, f.per_gpu))
    if len({(f.unit, f.better, f.per_gpu) for f in declared}) > 1:
        ways = "; ".join(sorted({f"{f.unit}, {f.better} is better" for f in declared}))
        return first, f"hosts declare it differently ({ways}): described, not judged"
    return first, None


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
    """Every series under its group (GPU model x count x figure x collective x size x CPU architecture)."""
    pools: dict[tuple[str, int, str, str | None, int | None, str | None], Pool] = defaultdict(Pool)
    for i, host in enumerate(hosts):
        for s in host.series:
            pool = pools[(host.gpu_model, host.gpu_count, s.figure, s.collective, s.nbytes, host.cpu_arch)]
            pool.values.extend(s.values.values())
            pool.series.append((i, s))
    return {GroupKey(*key): pool for key, pool in pools.items()}


def compare(hosts: list[HostReport], rule: stats.Rule, min_hosts: int) -> tuple[list[Group], list[Outlier]]:
    """Pure: the statistics of every group, the outliers of the groups large enough to judge by their
    median, and each smaller group judged against its model's expected figure where there is one."""
    groups: list[Group] = []
    outliers: list[Outlier] = []
    for key, pool in sorted(grouped(hosts).items(), key=lambda kv: _sort_key(kv[0])):
        figure, disagreement = pool_figure(key.figure, pool)
        summary = stats.summarize(pool.values)
        n_hosts = pool.hosts()
        if disagreement is not None:
            groups.append(Group(key, figure.unit, figure.better, summary, n_hosts, None, disagreement))
            continue
        if n_hosts < min_hosts:
            groups.append(_small_group(key, figure, pool, hosts, summary, min_hosts))
            continue
        groups.append(Group(key, figure.unit, figure.better, summary, n_hosts, "peers"))
        mad = stats.floored_mad(summary, mad_floor=figure.mad_floor, mad_floor_rel=figure.mad_floor_rel)
        if not stats.is_outlier(summary.worst(figure.better), summary, mad, figure.better, rule):
            continue
        for i, gpu_index, value in pool.beyond(stats.threshold(summary, mad, figure.better, rule), figure.better):
            gpu = hosts[i].gpu(gpu_index) if gpu_index is not None else None
            z = stats.z_score(value, summary, mad)
            outliers.append(Outlier(hosts[i].host, gpu, key, figure.unit, value, summary.median, z))
    return groups, outliers


def _small_group(
    key: GroupKey, figure: figures.Figure, pool: Pool, hosts: list[HostReport], summary: stats.Summary, min_hosts: int
) -> Group:
    """A group too small for its median to judge: against the model's expected figure, or not judged."""
    fewer = f"values from {pool.hosts()} host(s), under {min_hosts}"
    expected = _expected_figure(key, {hosts[i].matmul_at for i, _ in pool.series}, load_expectations())
    if expected is None:
        note = f"{fewer}, and no expected figure for it: described, not judged"
        return Group(key, figure.unit, figure.better, summary, pool.hosts(), None, note)
    below = tuple(
        BelowExpected(hosts[i].host, hosts[i].gpu(g) if g is not None else None, key, figure.unit, value, expected)
        for i, g, value in pool.members()
        if expected.verdict(value) != "pass"
    )
    note = f"{fewer}: judged against the {expected.model}'s expected {expected.value:g} {expected.unit}"
    return Group(key, figure.unit, figure.better, summary, pool.hosts(), "expected", note, expected, below)


def _expected_figure(key: GroupKey, matmul_at: set[tuple[str, str] | None], table: Expectations) -> Expected | None:
    """The model's figure a group's values are judged by, as verify judges them: the matmul rate at the
    table's one shape and dtype (every host of the group ran it), the allreduce busbw of large messages."""
    ran = next(iter(matmul_at)) if len(matmul_at) == 1 else None
    if key.figure == MATMUL and ran is not None:
        return table.matmul(key.gpu_model, *ran)
    if key.figure == BUSBW.name and key.collective == "allreduce" and (key.nbytes or 0) >= SATURATES:
        return table.busbw(key.gpu_model, key.gpu_count)
    return None


def _sort_key(key: GroupKey) -> tuple[str, int, str, str, int, str]:
    return (key.gpu_model, key.gpu_count, key.figure, key.collective or "", key.nbytes or 0, key.cpu_arch or "")


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
