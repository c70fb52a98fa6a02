"""`gpuenv fleet report` and `gpuenv fleet baseline learn` (added to the `fleet` group there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gpuenv import output
from gpuenv.cli import settings as settings_of
from gpuenv.cli.output import draw, emit_json, warn
from gpuenv.cli.params import history_options, history_path, output_option
from gpuenv.files import refuse_inputs, write_output
from gpuenv.fleet import stats
from gpuenv.fleet.baseline import LearnRequest, checked_text, learn_baselines, summary_line
from gpuenv.fleet.report import ReportRequest, fleet_report
from gpuenv.fleet.report_model import DEFAULT_CLOCK_SKEW_S
from gpuenv.output.fleet import outcome_line
from gpuenv.verify.cost import price_rows

REPORT_EPILOG = """\b
Examples:
  gpuenv fleet report reports/20261130T150405Z/
  gpuenv fleet report /var/log/gpuenv --html fleet.html --prometheus /var/lib/node_exporter/textfile/fleet.prom
  gpuenv fleet report reports/ --json | jq '.outliers[]'

\b
Reads every *.json below a folder; files that are not gpuenv verify reports are named and skipped.
With a [prices] table in the config file, adds what each kind of node's work costs (docs/cost.md).
A file whose schema says it is a gpuenv report but that cannot be read, and a host whose report is
dated ahead of this machine's clock (--clock-skew), leave the fleet not healthy.
Exit codes: 0 every host certified and no outlier, 1 otherwise, 2 bad request (no report found, an
output that is one of the inputs), 3 could not run (--html without the report extra, a failed write).
"""

PATHS = click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
MAX_CLOCK_SKEW_S = 7 * 24 * 3600.0  # a week: beyond it, a report from the future is no clock drift
MIN_HOSTS_HELP = "Judge outliers only in groups with values from at least N hosts."


@click.command("report", epilog=REPORT_EPILOG)
@PATHS
@click.option("--json", "as_json", is_flag=True, help="Print the fleet report as JSON (gpuenv.fleet-report/1).")
@click.option("--markdown", is_flag=True, help="Print the fleet report as Markdown.")
@output_option("--html", "Write one self-contained HTML page with plots here (needs gpuenv[report]).")
@output_option("--prometheus", "Write a node_exporter textfile of fleet gauges here (- for stdout).")
@click.option(
    "--z",
    "z",
    type=click.FloatRange(min=0, min_open=True),
    default=stats.DEFAULT_Z,
    show_default=True,
    help="Modified z-score beyond which a value is an outlier.",
)
@click.option(
    "--min-deviation",
    type=click.FloatRange(0, 1),
    default=stats.DEFAULT_MIN_DEVIATION,
    show_default=True,
    metavar="SHARE",
    help="An outlier also lies at least this share of the median away from it.",
)
@click.option(
    "--min-hosts",
    type=click.IntRange(min=2),
    default=stats.MIN_JUDGED,
    show_default=True,
    metavar="N",
    help=MIN_HOSTS_HELP,
)
@click.option(
    "--clock-skew",
    type=click.FloatRange(min=0, max=MAX_CLOCK_SKEW_S),
    default=DEFAULT_CLOCK_SKEW_S,
    show_default=True,
    metavar="SECONDS",
    help="A report dated further ahead of this machine's clock is flagged and never preferred.",
)
@history_options
@click.pass_context
def report(ctx: click.Context, /, paths: tuple[Path, ...], as_json: bool, markdown: bool, **options: Any) -> int:
    """Compare many nodes' verify reports: outcomes, failures by finding, robust statistics, outliers."""
    if as_json and markdown:
        raise click.UsageError("--json and --markdown exclude each other")
    html, prometheus = options["html"], options["prometheus"]
    refuse_inputs({"--html": html, "--prometheus": prometheus}, paths)
    if html is not None:
        output.require("fleet", "html")
    rule = stats.Rule(options["z"], options["min_deviation"])
    prices = price_rows(settings_of(ctx).config)
    request = ReportRequest(paths, rule, options["min_hosts"], history_path(options), prices, options["clock_skew"])
    result = fleet_report(request)
    for skipped in result.skipped:
        warn(f"skipped {skipped.path}: {skipped.reason}")
    if result.recorded is not None and not settings_of(ctx).quiet:
        click.echo(result.recorded.line(), err=True)
    if html is not None:
        output.write("fleet", "html", result, str(html), what="--html")
    _present(ctx, result, prometheus, as_json=as_json, markdown=markdown)
    return result.exit_code


def _present(ctx: click.Context, result: Any, prometheus: Path | None, *, as_json: bool, markdown: bool) -> None:
    if prometheus is not None:
        output.write("fleet", "prometheus", result, str(prometheus), what="--prometheus")
    if as_json or markdown:
        click.echo(output.text("fleet", "json" if as_json else "markdown", result), nl=False)
    elif not settings_of(ctx).quiet:
        draw(output.screen("fleet", result))
    else:
        click.echo(outcome_line(result))


LEARN_EPILOG = """\b
Examples:
  gpuenv fleet baseline learn reports/20261130T150405Z/ -o baselines.json
  gpuenv verify --baseline baselines.json

\b
Exit codes: 0 written, 2 bad request (no group with --min-hosts healthy hosts: nothing written).
"""


@click.group("baseline", epilog=LEARN_EPILOG)
def baseline() -> None:
    """Expected figures for `gpuenv verify --baseline`, learned from a fleet's reports."""


@baseline.command("learn", epilog=LEARN_EPILOG)
@PATHS
@output_option("--output", "Write the baselines file here (- for stdout).", short="-o")
@click.option(
    "--min-hosts",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    metavar="N",
    help="Leave out a group with values from fewer healthy hosts.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was learned as JSON on stdout.")
@click.pass_context
def learn(ctx: click.Context, paths: tuple[Path, ...], output: Path | None, min_hosts: int, as_json: bool) -> None:
    """Learn medians from the certified hosts' reports (outliers left out) into a gpuenv.baselines/2 file."""
    if output is None:
        raise click.UsageError("missing option '-o' / '--output'")
    if as_json and str(output) == "-":
        raise click.UsageError("--json and -o - both want standard output: give -o a file")
    refuse_inputs({"--output": output}, paths)
    learned = learn_baselines(LearnRequest(paths, min_hosts))
    write_output(str(output), checked_text(learned), what="--output")
    if as_json:
        emit_json(
            {
                "output": str(output),
                "rows": learned.rows,
                "hosts": learned.hosts,
                "healthy": learned.healthy,
                "left_out_values": learned.left_out_values,
                "notes": list(learned.notes),
                "skipped": list(learned.skipped),
            }
        )
    elif not settings_of(ctx).quiet:
        for skipped in learned.skipped:
            warn(f"skipped {skipped}")
        for note in learned.notes:
            click.echo(f"note: {note}", err=True)
        click.echo(summary_line(learned), err=True)
