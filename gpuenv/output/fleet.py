"""A fleet report's renderers: the terminal's tables, JSON, Markdown and Prometheus gauges
(registered in gpuenv.output.FORMATS; the HTML page is gpuenv.output.html)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuenv.fleet.report_hosts import HostAttention, attention, figure_text
from gpuenv.fleet.report_model import BelowExpected, FleetReport, Gpu, Group, GroupKey, Outlier
from gpuenv.output.jsontext import json_text
from gpuenv.output.screen import Block, Screen, escaped, line, table
from gpuenv.verify.cost import cost_table

MAX_LISTED = 20  # hosts named under one failure code before "and N more"
MAX_ATTENTION = 25  # hosts in the "needing attention" table before "and N more"


def _number(value: float, unit: str) -> str:
    """A figure at its unit's fixed precision, without the unit (the table has a unit column)."""
    return figure_text(value, unit).removesuffix(f" {unit}")


VERDICTS = {True: "healthy", False: "NOT healthy", None: "not judged"}


def outcome_line(report: FleetReport) -> str:
    counts = ", ".join(f"{n} {o}" for o, n in report.outcomes().items() if n)
    verdict = VERDICTS[report.healthy] + (" (with warnings)" if report.healthy and report.warnings else "")
    older = f" ({report.superseded} older report(s) of the same hosts set aside)" if report.superseded else ""
    doubts = [f"{n} {what}" for n, what in _doubts(report) if n]
    doubted = "".join(f"; {d}" for d in doubts)
    outlying = len({o.host for o in report.outliers})
    outliers = f"{outlying} host(s) with outliers" if outlying else "0 outlier(s)"
    return f"{len(report.hosts)} host(s){older}: {counts}; {outliers}{doubted}: fleet {verdict}"


ATTENTION_COLUMNS = ("host", "outcome", "what is wrong", "what to do")


def attention_rows(hosts: tuple[HostAttention, ...]) -> list[tuple[str, ...]]:
    """One row per problem, the host named on its first; the worst hosts first."""
    rows: list[tuple[str, ...]] = []
    for a in hosts[:MAX_ATTENTION]:
        for n, p in enumerate(a.problems):
            rows.append((a.host if n == 0 else "", a.outcome if n == 0 else "", p.what, p.todo))
    more = len(hosts) - MAX_ATTENTION
    return rows + ([(f"and {more} more", "", "", "")] if more > 0 else [])


def _doubts(report: FleetReport) -> tuple[tuple[int, str], ...]:
    flagged = sum(1 for h in report.hosts if h.flags)
    below = len({b.host for b in report.below_expected})
    unjudged = f"group(s) not judged (under {report.min_hosts} hosts, no expected figure)"
    return (
        (below, "host(s) under the expected figures"),
        (len(report.unreadable), "unreadable report file(s)"),
        (flagged, "flagged host(s)"),
        (len(report.unjudged), unjudged),
    )


def doubt_lines(report: FleetReport) -> list[str]:
    """Why the fleet cannot be called healthy besides outcomes and outliers: reports lost, hosts flagged."""
    lost = [f"unreadable report {s.path}: {s.reason}" for s in report.unreadable]
    return lost + [f"flagged {h.host}: {flag}" for h in report.hosts for flag in h.flags]


def failure_rows(report: FleetReport) -> Iterator[tuple[str, str, str]]:
    """(code, number of hosts, the hosts with the GPUs named there)."""
    for failure in report.failures:
        named = []
        for host, gpus in failure.hosts[:MAX_LISTED]:
            where = ", ".join(f"GPU {g.cuda_index}" + (f" {g.uuid}" if g.uuid else "") for g in gpus)
            named.append(f"{host} ({where})" if where else host)
        more = len(failure.hosts) - MAX_LISTED
        yield failure.code, str(len(failure.hosts)), "; ".join(named) + (f"; and {more} more" if more > 0 else "")


def group_row(group: Group) -> tuple[str, ...]:
    s = group.summary
    key = group.key
    return (
        key.gpu_model,
        str(key.gpu_count),
        key.metric(),
        group.unit,
        _number(s.median, group.unit),
        _number(s.mad, group.unit),
        _number(s.p5, group.unit),
        _number(s.p95, group.unit),
        str(s.n),
        _judged_cell(group),
    )


def _judged_cell(group: Group) -> str:
    if group.expected is not None:
        return f"expected {_number(group.expected.value, group.unit)}"
    return "yes" if group.judged else f"no: {group.hosts} host(s)"


GROUP_COLUMNS = ("GPU model", "GPUs", "metric", "unit", "median", "MAD", "p5", "p95", "n", "judged")
OUTLIER_COLUMNS = ("host", "GPU", "UUID", "serial", "metric", "value", "median", "off", "z")
FAILURE_COLUMNS = ("finding", "hosts", "where")
BELOW_COLUMNS = ("host", "GPU", "UUID", "serial", "metric", "value", "expected", "share", "verdict")


def below_rows(below: tuple[BelowExpected, ...]) -> list[tuple[str, ...]]:
    """One row per value under its model's figure, the lowest share first."""
    return [
        (
            b.host,
            "-" if b.gpu is None or b.gpu.cuda_index is None else str(b.gpu.cuda_index),
            (b.gpu.uuid if b.gpu else None) or "-",
            (b.gpu.serial if b.gpu else None) or "-",
            b.key.metric(),
            figure_text(b.value, b.unit),
            f"{figure_text(b.expected.value, b.unit)} ({b.expected.model})",
            f"{b.share:.0%}",
            b.severity,
        )
        for b in sorted(below, key=lambda b: b.share)
    ]


def outlier_rows(outliers: tuple[Outlier, ...]) -> list[tuple[str, ...]]:
    """One row per host, figure and GPU, its worst value (a slow link is one row, not one per size)."""
    worst: dict[tuple[str, str, int | None], tuple[Outlier, int]] = {}
    for o in outliers:
        where = (o.host, o.key.figure, o.gpu.cuda_index if o.gpu else None)
        kept, n = worst.get(where, (o, 0))
        worst[where] = (o if abs(o.z) > abs(kept.z) else kept, n + 1)
    return [outlier_row(o, n) for o, n in worst.values()]


def outlier_row(o: Outlier, values: int = 1) -> tuple[str, ...]:
    gpu = o.gpu
    detail = o.key.metric().removeprefix(o.key.figure).strip()
    metric = f"{o.key.figure} (worst of {values}: {detail})" if values > 1 and detail else o.key.metric()
    off = f"{(o.value - o.median) / o.median:+.0%}" if o.median else "-"
    return (
        o.host,
        "-" if gpu is None or gpu.cuda_index is None else str(gpu.cuda_index),
        (gpu.uuid if gpu else None) or "-",
        (gpu.serial if gpu else None) or "-",
        metric,
        figure_text(o.value, o.unit),
        figure_text(o.median, o.unit),
        off,
        f"{o.z:+.1f}",
    )


def screen(report: FleetReport) -> Screen:
    """The verdict, the hosts needing attention (worst first, what is wrong, what to do), then failures,
    outliers, groups and costs as tables, the history's events, and the verdict again; no empty table."""
    blocks: list[Block] = [line(outcome_line(report))]
    hosts = attention(report)
    if hosts:
        blocks.append(table(ATTENTION_COLUMNS, attention_rows(hosts), title="Hosts needing attention", title_left=True))
    if report.failures:
        blocks.append(table(FAILURE_COLUMNS, failure_rows(report), title="Failing findings"))
    if report.outliers:
        blocks.append(table(OUTLIER_COLUMNS, outlier_rows(report.outliers), title="Outliers", right_aligned=_RIGHT))
    if report.below_expected:
        rows = below_rows(report.below_expected)
        blocks.append(table(BELOW_COLUMNS, rows, title=BELOW_TITLE, right_aligned=_RIGHT))
    if report.groups:
        blocks.append(
            table(GROUP_COLUMNS, map(group_row, report.groups), title="Figures by group", right_aligned=_RIGHT)
        )
    if report.costs:
        columns, cells = cost_table(report.costs)
        blocks.append(table(columns, cells, title="Cost by node kind (USD, certified hosts)"))
        blocks += [line(note) for note in cost_notes(report)]
    blocks += [line(f"history: {event['message']}") for event in report.events]
    blocks += [line(text) for text in doubt_lines(report)]
    if report.not_judged:
        blocks.append(line(f"not judged: {report.not_judged}"))
    blocks.append(line(outcome_line(report)))
    return tuple(blocks)


_RIGHT = ("value", "median", "off", "z", "MAD", "p5", "p95", "n", "expected", "share")
BELOW_TITLE = "Under the GPU model's expected figures (groups too small to judge by their median)"


def to_json(report: FleetReport) -> str:
    """The report's JSON (gpuenv.fleet-report/2), with the hosts needing attention."""
    return json_text(report.to_dict() | {"attention": [a.to_dict() for a in attention(report)]})


def _md_table(columns: tuple[str, ...], rows: Iterator[tuple[str, ...]] | Any) -> list[str]:
    def cell(text: str) -> str:
        return escaped(text).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def rule_text(report: FleetReport) -> str:
    """How the report judged the groups, in a sentence."""
    rule = report.rule
    return (
        f"Modified z beyond {rule.z:g} and at least {rule.min_deviation:.0%} from the median, in the bad "
        f"direction; groups with values from fewer than {report.min_hosts} hosts are judged against their GPU "
        "model's expected figure where there is one (gpu-expectations.json), else not judged."
    )


def to_markdown(report: FleetReport) -> str:
    lines = ["# Fleet report", "", outcome_line(report), ""]
    hosts = attention(report)
    if hosts:
        lines += ["## Hosts needing attention", "", *_md_table(ATTENTION_COLUMNS, attention_rows(hosts)), ""]
    if report.skipped:
        lines += ["## Skipped files", ""] + [f"- `{escaped(s.path)}`: {escaped(s.reason)}" for s in report.skipped]
        lines += [""]
    flagged = [f"- {escaped(h.host)}: {escaped(flag)}" for h in report.hosts for flag in h.flags]
    if flagged:
        lines += ["## Flagged hosts", "", *flagged, ""]
    if report.failures:
        lines += ["## Failing findings", "", *_md_table(FAILURE_COLUMNS, failure_rows(report)), ""]
    if report.outliers:
        lines += ["## Outliers", ""]
        lines += [
            rule_text(report),
            "",
        ]
        lines += [*_md_table(OUTLIER_COLUMNS, outlier_rows(report.outliers)), ""]
    if report.below_expected:
        lines += [f"## {BELOW_TITLE}", "", *_md_table(BELOW_COLUMNS, below_rows(report.below_expected)), ""]
    if report.not_judged:
        lines += ["## Not judged", "", escaped(report.not_judged), ""]
    if report.events:
        lines += ["## GPU history", ""] + [f"- {escaped(e['message'])}" for e in report.events] + [""]
    if report.groups:
        lines += ["## Figures by group", "", *_md_table(GROUP_COLUMNS, map(group_row, report.groups))]
    if report.costs:
        columns, cells = cost_table(report.costs)
        lines += ["", "## Cost by node kind", "", "USD, at the config file's [prices], over the certified hosts.", ""]
        lines += [*_md_table(tuple(columns), map(tuple, cells))]
        lines += ["", *[f"- {escaped(line)}" for line in cost_notes(report)]] if cost_notes(report) else []
    return "\n".join(lines) + "\n"


def cost_notes(report: FleetReport) -> list[str]:
    """Why a kind of node has no cost figures (no price for it in [prices])."""
    return [f"cost: {c.group}: {c.note}" for c in report.costs if c.note]


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def to_prometheus(report: FleetReport) -> str:
    """node_exporter textfile format: outcomes, health, outliers, failure codes and group medians."""
    lines = _gauge("gpuenv_fleet_healthy", "1 when every host is certified, no outlier found and every group judged.")
    lines.append(f"gpuenv_fleet_healthy {int(report.healthy is True)}")
    lines += _gauge("gpuenv_fleet_judged", "1 when every group was judged (by its median or its model's figure).")
    lines.append(f"gpuenv_fleet_judged {int(not report.unjudged)}")
    lines += _gauge("gpuenv_fleet_hosts", "Hosts by the outcome of their latest report.")
    lines += [f'gpuenv_fleet_hosts{{outcome="{_label(o)}"}} {n}' for o, n in report.outcomes().items()]
    lines += _gauge("gpuenv_fleet_host_certified", "1 when the host's report certified it.")
    lines += [f'gpuenv_fleet_host_certified{{host="{_label(h.host)}"}} {int(h.certified)}' for h in report.hosts]
    lines += _gauge("gpuenv_fleet_skipped_files", "Files read that were not gpuenv verify reports, or corrupt.")
    lines.append(f"gpuenv_fleet_skipped_files {len(report.skipped)}")
    lines += _gauge("gpuenv_fleet_failure_hosts", "Hosts with a failing finding of this code.")
    lines += [f'gpuenv_fleet_failure_hosts{{code="{_label(f.code)}"}} {len(f.hosts)}' for f in report.failures]
    lines += _gauge("gpuenv_fleet_outliers", "Outliers found (a host's busbw, a GPU's figure).")
    lines.append(f"gpuenv_fleet_outliers {len(report.outliers)}")
    lines += _gauge("gpuenv_fleet_outlier_value", "The value of each outlier, labelled with where it lies.")
    lines += [f"gpuenv_fleet_outlier_value{{{_outlier_labels(o)}}} {o.value}" for o in report.outliers]
    lines += _gauge("gpuenv_fleet_below_expected", "A value under its GPU model's expected figure, with its verdict.")
    lines += [f"gpuenv_fleet_below_expected{{{_below_labels(b)}}} {b.value}" for b in report.below_expected]
    lines += _gauge("gpuenv_fleet_group_median", "Median of each group (GPU model x count x metric x size).")
    lines += [f"gpuenv_fleet_group_median{{{_group_labels(g)}}} {g.summary.median}" for g in report.groups]
    return "\n".join(lines) + "\n"


def _gauge(name: str, text: str) -> list[str]:
    return [f"# HELP {name} {text}", f"# TYPE {name} gauge"]


def _group_labels(group: Group) -> str:
    key = group.key
    labels = {"gpu_model": key.gpu_model, "gpus": key.gpu_count, "metric": key.figure}
    if key.cpu_arch:  # a label Prometheus reads as empty where reports did not record it
        labels["cpu_arch"] = key.cpu_arch
    if key.collective:
        labels |= {"collective": key.collective, "bytes": key.nbytes}
    return ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())


def _below_labels(b: BelowExpected) -> str:
    return _value_labels(b.host, b.gpu, b.key, severity=b.severity, expected=b.expected.value)


def _outlier_labels(o: Outlier) -> str:
    return _value_labels(o.host, o.gpu, o.key)


def _value_labels(host: str, gpu: Gpu | None, key: GroupKey, **extra: object) -> str:
    """Where a value lies: host, metric, the GPU (a per-GPU figure), collective and size (bandwidth)."""
    labels: dict[str, object] = {"host": host, "metric": key.figure}
    if gpu is not None:
        labels |= {"gpu": gpu.cuda_index, "gpu_uuid": gpu.uuid or "", "gpu_serial": gpu.serial or ""}
    if key.collective:
        labels |= {"collective": key.collective, "bytes": key.nbytes}
    return ",".join(f'{k}="{_label(v)}"' for k, v in (labels | extra).items())
