"""The fleet report as one self-contained HTML page: plots inline, nothing fetched (the `html` format).

Plots are drawn with matplotlib (the `report` extra): it renders offline to PNG bytes with no
JavaScript runtime or CDN behind it, it is the most widely maintained Python plotting library,
and its object API (`matplotlib.figure.Figure`, no pyplot) keeps no global state. Each plot is
a `data:` image, the table sorts with a few lines of inline script, and a Content-Security-Policy
forbids the page any request of its own.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jinja2

from gpuenv.extras import needed
from gpuenv.fleet.report_compare import grouped
from gpuenv.fleet.report_hosts import attention
from gpuenv.fleet.report_model import FleetReport, GroupKey, HostReport
from gpuenv.output.fleet import (
    ATTENTION_COLUMNS,
    BELOW_COLUMNS,
    BELOW_TITLE,
    FAILURE_COLUMNS,
    GROUP_COLUMNS,
    OUTLIER_COLUMNS,
    attention_rows,
    below_rows,
    cost_notes,
    failure_rows,
    group_row,
    outcome_line,
    outlier_rows,
    rule_text,
)
from gpuenv.resources import data_file
from gpuenv.verify.cost import cost_table

TFLOPS = "amp.matmul_tflops"
BUSBW = "allreduce.busbw_gbps"
BAD = "#c0392b"
GOOD = "#2c7fb8"


@dataclass(frozen=True)
class Plot:
    title: str
    png_base64: str
    alt: str


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96, bbox_inches="tight", metadata={"Software": None})
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _outlier_points(report: FleetReport, key: GroupKey) -> set[tuple[str, int | None]]:
    return {(o.host, o.gpu.cuda_index if o.gpu else None) for o in report.outliers if o.key == key}


def busbw_plots(report: FleetReport) -> Iterator[Plot]:
    """A histogram of hosts' busbw per GPU model, count, collective and size; outliers in red."""
    with needed("matplotlib", "fleet report --html"):
        from matplotlib.figure import Figure  # heavy optional extra (gpuenv[report]), only for --html

    for key, pool in grouped(report.hosts).items():
        if key.figure != BUSBW:
            continue
        members = list(pool.members())
        marked = _outlier_points(report, key)
        values = [v for i, _, v in members if (report.hosts[i].host, None) not in marked]
        bad = [(report.hosts[i].host, v) for i, _, v in members if (report.hosts[i].host, None) in marked]
        fig = Figure(figsize=(7, 3.2))
        ax = fig.add_subplot()
        ax.hist([values, [v for _, v in bad]], bins=40, stacked=True, color=[GOOD, BAD], label=["hosts", "outliers"])
        for host, value in bad[:10]:
            ax.annotate(
                host,
                (value, 0),
                xytext=(0, 12),
                textcoords="offset points",
                color=BAD,
                fontsize=7,
                rotation=90,
                ha="center",
            )
        ax.set_xlabel("busbw (GB/s)")
        ax.set_ylabel("hosts")
        ax.legend(loc="upper left", fontsize=8)
        title = key.label()
        ax.set_title(title, fontsize=9)
        yield Plot(title, _png(fig), f"histogram of {len(members)} hosts' busbw, {len(bad)} outlier(s)")


def tflops_plots(report: FleetReport) -> Iterator[Plot]:
    """Each GPU's matmul TFLOP/s by host (hosts in name order), per GPU model and count; outliers in red."""
    with needed("matplotlib", "fleet report --html"):
        from matplotlib.figure import Figure  # heavy optional extra (gpuenv[report]), only for --html

    for key, pool in grouped(report.hosts).items():
        if key.figure != TFLOPS:
            continue
        members = list(pool.members())
        names = sorted({report.hosts[i].host for i, _, _ in members})
        position = {name: n for n, name in enumerate(names)}
        marked = _outlier_points(report, key)
        points = [(position[report.hosts[i].host], v, (report.hosts[i].host, gpu) in marked) for i, gpu, v in members]
        fig = Figure(figsize=(7, 3.2))
        ax = fig.add_subplot()
        for is_bad, colour, label in ((False, GOOD, "GPUs"), (True, BAD, "outliers")):
            xs = [x for x, _, b in points if b == is_bad]
            ys = [y for _, y, b in points if b == is_bad]
            if xs:
                ax.scatter(xs, ys, s=6 if not is_bad else 18, color=colour, label=label)
        if len(names) <= 40:
            ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
        else:
            ax.set_xlabel(f"{len(names)} hosts, in name order")
        ax.set_ylabel("TFLOP/s")
        ax.legend(loc="best", fontsize=8)
        ax.set_title(key.label(), fontsize=9)
        bad = sum(1 for *_, b in points if b)
        yield Plot(key.label(), _png(fig), f"{len(points)} GPUs' matmul TFLOP/s by host, {bad} outlier(s)")


def host_rows(report: FleetReport) -> Iterator[tuple[str, ...]]:
    outliers: dict[str, int] = {}
    for o in report.outliers:
        outliers[o.host] = outliers.get(o.host, 0) + 1
    for h in report.hosts:
        yield (
            h.host,
            h.outcome,
            h.gpu_model,
            str(h.gpu_count),
            " ".join(_codes(h)),
            str(outliers.get(h.host, 0)),
            h.started,
            h.path,
        )


def _codes(host: HostReport) -> list[str]:
    return sorted({code for code, _ in host.failures})


HOST_COLUMNS = ("host", "outcome", "GPU model", "GPUs", "failing findings", "outliers", "started", "report")
LOCALISATION_COLUMNS = ("round", "measured", "nodes", "witnesses", "ranks", "busbw GB/s", "verdict")


def localisation_runs(report: FleetReport) -> list[dict[str, Any]]:
    """Each run across nodes that localised: a headline (what it named, why it searched, what stopped
    it, which hosts' reports hold it) and a row per group of every round."""
    found = []
    for run in report.localisations:
        named = {"slow node": " " + "".join(run["nodes"]), "slow link": " " + "-".join(run["nodes"])}
        stopped = f"; stopped: {run['exceeded']}" if run.get("exceeded") else ""
        headline = (
            f"job {run['job']}: {run['outcome']}{named.get(run['outcome'], '')} after {len(run['rounds']) - 1} "
            f"round(s) ({run['why']}{stopped}); reported by {', '.join(run['hosts'])}"
        )
        rows = [_group_row(r, g) for r in run["rounds"] for g in r["groups"]]
        found.append({"headline": headline, "bad": run["outcome"] != "nothing slow", "rows": rows})
    return found


def _group_row(measured: dict[str, Any], group: dict[str, Any]) -> tuple[str, ...]:
    nodes, witnesses = "+".join(group["nodes"]), ", ".join(group["witnesses"])
    busbw = f"{group['busbw_gbps']:.3g}"
    return (str(measured["round"]), measured["label"], nodes, witnesses, str(group["ranks"]), busbw, group["verdict"])


def _page() -> jinja2.Template:
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(data_file("fleet-report.html.j2").read_text(encoding="utf-8"))


def to_html(report: FleetReport) -> str:
    cost_columns, costs = cost_table(report.costs)
    return _page().render(
        healthy=report.healthy is True,
        summary=outcome_line(report),
        not_judged=report.not_judged,
        skipped=report.skipped,
        failure_columns=FAILURE_COLUMNS,
        failures=list(failure_rows(report)),
        rule=rule_text(report),
        outlier_columns=OUTLIER_COLUMNS,
        outliers=outlier_rows(report.outliers),
        below_title=BELOW_TITLE,
        below_columns=BELOW_COLUMNS,
        below=below_rows(report.below_expected),
        attention_columns=ATTENTION_COLUMNS,
        attention=attention_rows(attention(report)),
        events=report.events,
        busbw=list(busbw_plots(report)),
        tflops=list(tflops_plots(report)),
        host_columns=HOST_COLUMNS,
        hosts=list(host_rows(report)),
        group_columns=GROUP_COLUMNS,
        groups=[group_row(g) for g in report.groups],
        cost_columns=cost_columns,
        costs=costs,
        cost_notes=cost_notes(report),
        localisation_columns=LOCALISATION_COLUMNS,
        localisations=localisation_runs(report),
    )
