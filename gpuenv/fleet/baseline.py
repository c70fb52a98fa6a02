"""`gpuenv fleet baseline learn`: expected figures learned from a fleet's healthy reports.

Only certified hosts count, and of them not the values the fleet comparison calls outliers. Per
GPU model and count, collective and size the median busbw; per GPU model, dtype and shape the
median matmul TFLOP/s; per GPU model and count the median of every registered figure (the
`figures` table of gpuenv.baselines/2, so a later check's figure needs no format change). The CPU
architecture is part of every group, as it is of `fleet report`'s: a row learned on aarch64 hosts
names it and is expected there only (reports that do not record it give rows for any). Each
row carries its sample count; a group with values from fewer than `min_hosts` hosts is left out
with a note. The result is a file `gpuenv verify --baseline` reads.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuenv import schema
from gpuenv.errors import BadRequest
from gpuenv.fleet import stats
from gpuenv.fleet.report_compare import compare
from gpuenv.fleet.report_model import BUSBW, HostReport
from gpuenv.fleet.report_reading import load, report_files, workers_for
from gpuenv.resources import data_file
from gpuenv.verify.baselines import SCHEMA as BASELINES_SCHEMA

DEFAULT_MIN_HOSTS = 5


@dataclass(frozen=True)
class LearnRequest:
    paths: tuple[Path, ...]
    min_hosts: int = DEFAULT_MIN_HOSTS
    rule: stats.Rule = field(default_factory=stats.Rule)


@dataclass(frozen=True)
class Learned:
    baselines: dict[str, Any]  # the gpuenv.baselines/2 document
    hosts: int  # reports read
    healthy: int  # certified hosts the values came from
    left_out_values: int  # outliers among the healthy hosts' values
    notes: tuple[str, ...]  # groups left out, and why
    skipped: tuple[str, ...]  # files that were not reports

    @property
    def rows(self) -> int:
        return sum(len(self.baselines[t]) for t in ("busbw", "matmul_tflops", "figures"))


# A value's identity: host index, figure, collective, size, GPU (to leave an outlier's value out).
ValueId = tuple[int, str, str | None, int | None, int | None]


def _outlier_ids(hosts: list[HostReport], rule: stats.Rule) -> set[ValueId]:
    _, outliers = compare(hosts, rule, stats.MIN_JUDGED)
    index = {h.host: i for i, h in enumerate(hosts)}
    return {
        (index[o.host], o.key.figure, o.key.collective, o.key.nbytes, o.gpu.cuda_index if o.gpu else None)
        for o in outliers
    }


def _median_rows(
    values: dict[tuple[Any, ...], list[tuple[int, float]]], min_hosts: int, what: str, notes: list[str]
) -> list[tuple[tuple[Any, ...], float, int]]:
    """(key, median, samples) of each group with values from enough hosts; the others get a note."""
    rows = []
    for key, members in sorted(values.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        n_hosts = len({i for i, _ in members})
        if n_hosts < min_hosts:
            label = " ".join(str(k) for k in key if k is not None)
            notes.append(f"{what} {label}: values from {n_hosts} healthy host(s), under {min_hosts}: left out")
            continue
        rows.append((key, stats.summarize([v for _, v in members]).median, len(members)))
    return rows


def learn_baselines(request: LearnRequest) -> Learned:
    """The service: read, keep the healthy hosts' non-outlier values, take medians (exit 2 if nothing is left)."""
    files = list(report_files(request.paths))
    with workers_for(len(files)) as pool:
        all_hosts, skipped, _ = load(files, pool, matmul=True)
    if not all_hosts:
        raise BadRequest(
            f"no gpuenv verify report in {', '.join(str(p) for p in request.paths)}",
            hint="give the reports written by `gpuenv verify --report FILE` or `gpuenv fleet verify`",
        )
    hosts = [h for h in all_hosts if h.certified and h.gpu_model != "CPU"]
    outliers = _outlier_ids(hosts, request.rule)
    notes = [f"{h.host}: {flag}" for h in all_hosts for flag in h.flags]  # a report dated ahead of the clock
    if any(h.gpu_model == "CPU" for h in all_hosts):
        notes.append("reports of CPU-only runs left out: verify judges no CPU figure against a baseline")
    busbw, matmul, per_figure = _collect(hosts, outliers)
    document = _document(
        _median_rows(busbw, request.min_hosts, "busbw", notes),
        _median_rows(matmul, request.min_hosts, "matmul", notes),
        _median_rows(per_figure, request.min_hosts, "figure", notes),
        healthy=len({h.host for h in hosts}),
    )
    learned = Learned(
        document,
        len(all_hosts),
        len(hosts),
        len(outliers),
        tuple(notes),
        tuple(f"{s.path}: {s.reason}" for s in skipped),
    )
    if not learned.rows:
        raise BadRequest(
            f"no group has values from {request.min_hosts} healthy host(s): nothing to learn "
            f"({_counted(hosts, all_hosts)})",
            hint="give more certified hosts' reports, or lower --min-hosts",
        )
    return learned


def _counted(hosts: list[HostReport], all_hosts: list[HostReport]) -> str:
    """ "1 certified GPU report of 10 (9 certified on CPU only)": what the hosts were, not just how few."""
    cpu_only = sum(1 for h in all_hosts if h.gpu_model == "CPU" and h.certified)
    uncertified = sum(1 for h in all_hosts if not h.certified)
    text = f"{len(hosts)} certified GPU report(s) of {len(all_hosts)}"
    parts = [f"{cpu_only} certified on CPU only"] if cpu_only else []
    parts += [f"{uncertified} not certified"] if uncertified else []
    return text + (f" ({', '.join(parts)})" if parts else "")


def _collect(
    hosts: list[HostReport], outliers: set[ValueId]
) -> tuple[dict[tuple[Any, ...], list[tuple[int, float]]], ...]:
    busbw: dict[tuple[Any, ...], list[tuple[int, float]]] = defaultdict(list)
    matmul: dict[tuple[Any, ...], list[tuple[int, float]]] = defaultdict(list)
    per_figure: dict[tuple[Any, ...], list[tuple[int, float]]] = defaultdict(list)
    for i, host in enumerate(hosts):
        cpu = host.cpu_arch
        for s in host.series:
            for gpu, value in s.values.items():
                if (i, s.figure, s.collective, s.nbytes, gpu) in outliers or value <= 0:
                    continue
                if s.figure == BUSBW.name:
                    busbw[(host.gpu_model, cpu, host.gpu_count, s.collective, s.nbytes)].append((i, value))
                else:
                    per_figure[(host.gpu_model, cpu, host.gpu_count, s.figure)].append((i, value))
        for dtype, shape, index, value in host.matmul:
            if (i, "amp.matmul_tflops", None, None, index) not in outliers:
                matmul[(host.gpu_model, cpu, dtype, shape)].append((i, value))
    return busbw, matmul, per_figure


def _document(
    busbw: list[tuple[tuple[Any, ...], float, int]],
    matmul: list[tuple[tuple[Any, ...], float, int]],
    per_figure: list[tuple[tuple[Any, ...], float, int]],
    *,
    healthy: int,
) -> dict[str, Any]:
    shipped = json.loads(data_file("baselines.json").read_text(encoding="utf-8"))
    source = f"gpuenv fleet baseline learn: median of {healthy} certified host(s), outliers left out"
    # expected_busbw takes the first row whose min_bytes the size reaches: largest sizes first.
    busbw_rows = sorted(busbw, key=lambda r: (r[0][0], r[0][1] or "", r[0][2], r[0][3], -r[0][4]))
    return {
        "schema": BASELINES_SCHEMA,
        "about": f"Learned by {source}. Each row's samples counts the values its median was taken from.",
        "fail_below": shipped["fail_below"],
        "warn_below": shipped["warn_below"],
        "busbw": [
            {
                "gpu": m,
                "match": [m],
                "gpus": n,
                "collective": c,
                "min_bytes": b,
                "busbw_gbps": round(v, 3),
                "samples": k,
                "source": source,
            }
            | _on(cpu)
            for (m, cpu, n, c, b), v, k in busbw_rows
        ],
        "matmul_tflops": [
            {"gpu": m, "match": [m], "dtype": d, "shape": s, "tflops": round(v, 3), "samples": k, "source": source}
            | _on(cpu)
            for (m, cpu, d, s), v, k in matmul
        ],
        "figures": [
            {"gpu": m, "match": [m], "gpus": n, "figure": f, "value": round(v, 6), "samples": k, "source": source}
            | _on(cpu)
            for (m, cpu, n, f), v, k in per_figure
        ],
    }


def _on(cpu_arch: str | None) -> dict[str, str]:
    """A row's CPU architecture, where the reports recorded it."""
    return {"cpu_arch": cpu_arch} if cpu_arch else {}


def checked_text(learned: Learned) -> str:
    """The file's text, checked against the shipped baselines schema before it is written."""
    try:
        schema.check(learned.baselines, "baselines")
    except schema.SchemaViolation as exc:  # e.g. a GPU name in a report that the format cannot hold
        raise BadRequest(
            f"learned baselines do not fit the format: {exc}", hint="check the GPU names in the reports"
        ) from exc
    return json.dumps(learned.baselines, indent=2) + "\n"


def summary_line(learned: Learned) -> str:
    return (
        f"learned {learned.rows} row(s) from {learned.healthy} certified of {learned.hosts} host(s); "
        f"{learned.left_out_values} outlier value(s) left out"
    )
