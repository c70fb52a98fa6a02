"""A fleet report's renderers: the terminal's tables, JSON, Markdown and Prometheus gauges
(registered in gpuenv.output.FORMATS; the HTML page is gpuenv.output.html)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuenv.fleet.report_model import FleetReport, Group, Outlier
from gpuenv.output.jsontext import json_text
from gpuenv.output.screen import Block, Screen, escaped, line, table
from gpuenv.verify.cost import cost_table

MAX_LISTED = 20  # hosts named under one failure code before "and N more"


def _number(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


def outcome_line(report: FleetReport) -> str:
    counts = ", ".join(f"{n} {o}" for o, n in report.outcomes().items() if n)
    verdict = "healthy" if report.healthy else "NOT healthy"
    older = f" ({report.superseded} older report(s) of the same hosts set aside)" if report.superseded else ""
    doubts = [f"{n} {what}" for n, what in _doubts(report) if n]
    doubted = "".join(f"; {d}" for d in doubts)
    return f"{len(report.hosts)} host(s){older}: {counts}; {len(report.outliers)} outlier(s){doubted}: fleet {verdict}"


def _doubts(report: FleetReport) -> tuple[tuple[int, str], ...]:
    flagged = sum(1 for h in report.hosts if h.flags)
    return ((len(report.unreadable), "unreadable report file(s)"), (flagged, "flagged host(s)"))


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
        _number(s.median),
        _number(s.mad),
        _number(s.p5),
        _number(s.p95),
        str(s.n),
        "yes" if group.judged else f"no: {group.hosts} host(s)",
    )


GROUP_COLUMNS = ("GPU model", "GPUs", "metric", "unit", "median", "MAD", "p5", "p95", "n", "judged")
OUTLIER_COLUMNS = ("host", "GPU", "UUID", "serial", "metric", "value", "median", "z")
FAILURE_COLUMNS = ("finding", "hosts", "where")


def outlier_row(o: Outlier) -> tuple[str, ...]:
    gpu = o.gpu
    return (
        o.host,
        "-" if gpu is None or gpu.cuda_index is None else str(gpu.cuda_index),
        (gpu.uuid if gpu else None) or "-",
        (gpu.serial if gpu else None) or "-",
        o.key.metric(),
        f"{_number(o.value)} {o.unit}",
        _number(o.median),
        f"{o.z:+.1f}",
    )


def screen(report: FleetReport) -> Screen:
    """Failures, outliers, groups and costs as tables, then the history's events and the verdict."""
    blocks: list[Block] = []
    if report.failures:
        blocks.append(table(FAILURE_COLUMNS, failure_rows(report), title="Failing findings"))
    if report.outliers:
        blocks.append(table(OUTLIER_COLUMNS, map(outlier_row, report.outliers), title="Outliers"))
    blocks.append(table(GROUP_COLUMNS, map(group_row, report.groups), title="Figures by group"))
    if report.costs:
        columns, cells = cost_table(report.costs)
        blocks.append(table(columns, cells, title="Cost by node kind (USD, certified hosts)"))
        blocks += [line(note) for note in cost_notes(report)]
    blocks += [line(f"history: {event['message']}") for event in report.events]
    blocks += [line(text) for text in doubt_lines(report)]
    blocks.append(line(outcome_line(report)))
    return tuple(blocks)


def to_json(report: FleetReport) -> str:
    return json_text(report.to_dict())


def _md_table(columns: tuple[str, ...], rows: Iterator[tuple[str, ...]] | Any) -> list[str]:
    def cell(text: str) -> str:
        return escaped(text).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def to_markdown(report: FleetReport) -> str:
    lines = ["# Fleet report", "", outcome_line(report), ""]
    if report.skipped:
        lines += ["## Skipped files", ""] + [f"- `{escaped(s.path)}`: {escaped(s.reason)}" for s in report.skipped]
        lines += [""]
    flagged = [f"- {escaped(h.host)}: {escaped(flag)}" for h in report.hosts for flag in h.flags]
    if flagged:
        lines += ["## Flagged hosts", "", *flagged, ""]
    if report.failures:
        lines += ["## Failing findings", "", *_md_table(FAILURE_COLUMNS, failure_rows(report)), ""]
    lines += ["## Outliers", ""]
    rule = report.rule
    lines += [
        f"Modified z beyond {rule.z:g} and at least {rule.min_deviation:.0%} from the median, in the bad "
        f"direction; groups with values from fewer than {report.min_hosts} hosts are not judged.",
        "",
    ]
    lines += [*_md_table(OUTLIER_COLUMNS, map(outlier_row, report.outliers)), ""] if report.outliers else ["None.", ""]
    if report.events:
        lines += ["## GPU history", ""] + [f"- {escaped(e['message'])}" for e in report.events] + [""]
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
    lines = _gauge("gpuenv_fleet_healthy", "1 when every host is certified and no outlier was found.")
    lines.append(f"gpuenv_fleet_healthy {int(report.healthy)}")
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
    lines += _gauge("gpuenv_fleet_group_median", "Median of each group (GPU model x count x metric x size).")
    lines += [f"gpuenv_fleet_group_median{{{_group_labels(g)}}} {g.summary.median}" for g in report.groups]
    return "\n".join(lines) + "\n"


def _gauge(name: str, text: str) -> list[str]:
    return [f"# HELP {name} {text}", f"# TYPE {name} gauge"]


def _group_labels(group: Group) -> str:
    key = group.key
    labels = {"gpu_model": key.gpu_model, "gpus": key.gpu_count, "metric": key.figure}
    if key.collective:
        labels |= {"collective": key.collective, "bytes": key.nbytes}
    return ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())


def _outlier_labels(o: Outlier) -> str:
    labels: dict[str, object] = {"host": o.host, "metric": o.key.figure}
    if o.gpu is not None:
        labels |= {"gpu": o.gpu.cuda_index, "gpu_uuid": o.gpu.uuid or "", "gpu_serial": o.gpu.serial or ""}
    if o.key.collective:
        labels |= {"collective": o.key.collective, "bytes": o.key.nbytes}
    return ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
