"""A verify report's renderers: the terminal's screen (and a log's lines, off a terminal), JSON, the
job summary and a Prometheus textfile (registered in gpuenv.output.FORMATS; gpuenv.files writes
them). JUnit XML is junit.py's, so that a report written as JSON never loads the XML library."""

from __future__ import annotations

import textwrap
from collections.abc import Collection
from datetime import datetime
from typing import Any

from gpuenv.output.jsontext import json_text
from gpuenv.output.screen import Block, Screen, Span, escaped, line, table
from gpuenv.verify.model import STATUSES, CheckResult, Finding, Report

STYLE = {
    "pass": "green",
    "warn": "yellow",
    "skip": "dim",
    "fail": "bold red",
    "timeout": "bold red",
    "crash": "bold red",
    "error": "magenta",
}


def to_json(report: Report) -> str:
    return json_text(report.to_dict())


JOB_SCHEMA = "gpuenv.verify-job/1"


def to_job_summary(report: Report) -> str:
    """What rank 0 writes for a run across nodes: the job's nodes, intra- and inter-node busbw, the
    suspect or hung nodes, the localisation's rounds, and the collective check's verdict (each node's
    own report has the rest)."""
    check = next((c for c in report.checks if c.name == "allreduce"), None)
    multi = report.multi_node or {}
    summary = {
        "schema": JOB_SCHEMA,
        "written_by": {"node": multi.get("node"), "hostname": report.host.get("hostname")},
        "finished": report.finished,
        **{k: multi.get(k) for k in ("launcher", "job", "nnodes", "master", "comm_env")},
        "world": check.metrics.get("world") if check else None,
        **{k: multi.get(k) for k in ("nodes", "intra_node", "inter_node", "node_pairs", "suspect_nodes", "hung")},
        "localisation": multi.get("localisation"),
        "check": check.to_dict() if check else None,
        "verdict": report.to_dict()["verdict"],
    }
    return json_text(summary)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def to_prometheus(report: Report) -> str:
    """node_exporter textfile format: verdict, per-check status and duration, busbw, TFLOP/s."""
    host = _label(str(report.host.get("hostname", "")))
    level = _label(report.level)
    lines = [
        "# HELP gpuenv_verify_certified 1 when the node passed gpuenv verify.",
        "# TYPE gpuenv_verify_certified gauge",
        f'gpuenv_verify_certified{{level="{level}",host="{host}"}} {int(report.verdict.certified)}',
        "# HELP gpuenv_verify_exit_code Exit code of the last gpuenv verify run.",
        "# TYPE gpuenv_verify_exit_code gauge",
        f'gpuenv_verify_exit_code{{level="{level}",host="{host}"}} {report.verdict.exit_code}',
        "# HELP gpuenv_verify_check_status 1 for the status each check ended in.",
        "# TYPE gpuenv_verify_check_status gauge",
    ]
    for check in report.checks:
        for status in STATUSES:
            lines.append(
                f'gpuenv_verify_check_status{{check="{check.name}",status="{status}"}} {int(check.status == status)}'
            )
    lines += [
        "# HELP gpuenv_verify_check_duration_seconds Time each check took.",
        "# TYPE gpuenv_verify_check_duration_seconds gauge",
    ]
    lines += [f'gpuenv_verify_check_duration_seconds{{check="{c.name}"}} {c.duration_s:.3f}' for c in report.checks]
    lines += _performance(report)
    lines += _cost_metrics(report)
    lines += [
        "# HELP gpuenv_verify_last_run_timestamp_seconds When the run finished.",
        "# TYPE gpuenv_verify_last_run_timestamp_seconds gauge",
        f"gpuenv_verify_last_run_timestamp_seconds {_epoch(report.finished)}",
    ]
    return "\n".join(lines) + "\n"


def _performance(report: Report) -> list[str]:
    lines: list[str] = []
    by_name = {c.name: c for c in report.checks}
    sizes = by_name["allreduce"].metrics.get("sizes", []) if "allreduce" in by_name else []
    if sizes:
        lines += [
            "# HELP gpuenv_verify_busbw_gbps Collective bus bandwidth (nccl-tests definition), GB/s.",
            "# TYPE gpuenv_verify_busbw_gbps gauge",
        ]
        for row in sizes:
            value = row["busbw_gbps"] if row["busbw_gbps"] is not None else row["algbw_gbps"]
            kind = "busbw" if row["busbw_gbps"] is not None else "algbw"
            lines.append(
                f'gpuenv_verify_busbw_gbps{{collective="{row["collective"]}",bytes="{row["bytes"]}",'
                f'kind="{kind}"}} {value}'
            )
    tflops = by_name["amp"].metrics.get("matmul_tflops", {}) if "amp" in by_name else {}
    if tflops:
        dtype = by_name["amp"].metrics.get("matmul_dtype", "")
        lines += [
            "# HELP gpuenv_verify_matmul_tflops Achieved matmul throughput per device, TFLOP/s.",
            "# TYPE gpuenv_verify_matmul_tflops gauge",
        ]
        lines += [f'gpuenv_verify_matmul_tflops{{device="{d}",dtype="{dtype}"}} {v}' for d, v in tflops.items()]
    return lines


def _cost_metrics(report: Report) -> list[str]:
    figures = report.cost["figures"] if report.cost else []
    if not figures:
        return []
    lines = [
        "# HELP gpuenv_verify_cost_usd What a unit of work costs at the price given (the unit is a label).",
        "# TYPE gpuenv_verify_cost_usd gauge",
    ]
    lines += [
        f'gpuenv_verify_cost_usd{{figure="{_label(e["figure"])}",unit="{_label(e["unit"])}"}} {e["value"]}'
        for e in figures
    ]
    return lines


def _epoch(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp())


def screen(report: Report) -> Screen:
    """The checks as a table, then the findings worth a look, the cost figures and the verdict."""
    scope = "CPU only" if report.cpu_only else "CUDA"
    rows = [
        (check.name, Span(check.status, STYLE[check.status]), f"{check.duration_s:.1f}s", check.summary)
        for check in report.checks
    ]
    title = f"gpuenv verify --level {report.level} on {report.host.get('hostname')} ({scope})"
    blocks: list[Block] = [
        table(("check", "status", "time", "result"), rows, title=title, title_left=True, right_aligned=("time",))
    ]
    for check in report.checks:
        for finding in worth_a_look(check):
            style = "bold red" if finding.severity == "fail" else "yellow"
            blocks.append(line(Span(finding.severity, style), f" {check.name}: {finding.message}"))
            if finding.remediation:
                blocks.append(line(f"     fix: {finding.remediation} ({finding.action})"))
    blocks += [line(text) for text in cost_lines(report.cost)]
    blocks.append(line(Span(report.verdict.summary, "bold green" if report.verdict.certified else "bold red")))
    return tuple(blocks)


LOG_WIDTH = 100  # a log's lines (off a terminal) fit 100 columns
CHECK_INDENT = 29  # where a check's result starts on its log line: what wraps, and its findings, go under it


def check_log(check: CheckResult) -> str:
    """A finished check as a log shows it (off a terminal, as it finishes): its line, then each
    finding worth a look (what the line does not say already) and each fix, within LOG_WIDTH."""
    lines = wrapped(f"  {check.name:<10} {check.status:<7} {check.duration_s:5.1f}s  {check.summary}", CHECK_INDENT)
    pad = " " * CHECK_INDENT
    for finding in worth_a_look(check):
        if finding.message != check.summary:
            lines += wrapped(f"{pad}{finding.severity}: {finding.message}", CHECK_INDENT + len(finding.severity) + 2)
        if finding.remediation:
            lines += wrapped(f"{pad}fix: {finding.remediation} ({finding.action})", CHECK_INDENT + 5)
    return "\n".join(lines)


def log_tail(report: Report, logged: Collection[tuple[str, str]]) -> str:
    """What follows a run's check lines in a log: the findings worth a look that were not logged
    with their check (`logged`: (check, message); XIDs seen after it finished), the cost figures
    and the verdict."""
    lines: list[str] = []
    for check in report.checks:
        for finding in worth_a_look(check):
            if (check.name, finding.message) not in logged:
                lines += wrapped(f"{finding.severity} {check.name}: {finding.message}", 5)
                if finding.remediation:
                    lines += wrapped(f"     fix: {finding.remediation} ({finding.action})", 10)
    for text in [*cost_lines(report.cost), report.verdict.summary]:
        lines += wrapped(text, 2)
    return "\n".join(lines)


def worth_a_look(check: CheckResult) -> list[Finding]:
    return [finding for finding in check.findings if finding.severity != "info"]


def wrapped(text: str, indent: int) -> list[str]:
    """Text (control characters escaped) as lines within LOG_WIDTH; what wraps starts `indent` in."""
    return textwrap.wrap(escaped(text), LOG_WIDTH, subsequent_indent=" " * indent) or [""]


def cost_lines(cost: dict[str, Any] | None) -> list[str]:
    """The cost figures as lines for a terminal (none without a price)."""
    if not cost:
        return []
    price = cost["price"]
    where = " on the CPU" if cost.get("device") == "cpu" else ""
    lines = [f"cost at {price['usd_per_hour']:g} USD/h ({price['source']}){where}:"]
    for entry in cost["figures"]:
        lines.append(
            f"  {entry['value']:>10.4g} {entry['unit']}  ({entry['figure']} {entry['rate']:g} {entry['rate_unit']})"
        )
    if not cost["figures"]:
        lines.append("  no throughput figure in this run to cost")
    return lines
