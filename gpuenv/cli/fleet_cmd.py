"""`gpuenv fleet`: verify many nodes over Ansible, and the history of every GPU they reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gpuenv import config, output, validate
from gpuenv.cli import settings
from gpuenv.cli.fleet_compat_cmd import compat
from gpuenv.cli.fleet_report_cmd import baseline, report
from gpuenv.cli.host_params import become_prompt, host_options, hosts_request
from gpuenv.cli.output import console, draw, emit_json, printable, shortened, table, warn
from gpuenv.cli.params import checked, history_options, history_path, site_request, verify_option
from gpuenv.errors import BadRequest
from gpuenv.fleet import history as store
from gpuenv.fleet.collect import HINTS, FleetBoard, FleetVerifyResult, HostOutcome
from gpuenv.fleet.request import FleetVerifyRequest
from gpuenv.fleet.service import prepare, run

VERIFY_EPILOG = """\b
Examples:
  gpuenv fleet verify -i hosts.ini --level standard --expect-gpus 8
  gpuenv fleet verify gpu01 gpu02 --check nvml --policy nvml-policy.json
  gpuenv fleet verify -i hosts.ini --retry-failed reports/20261130T150405Z
  NCCL_SOCKET_IFNAME=ib0 gpuenv fleet verify -i hosts.ini --multi-node   # one allreduce across the hosts
  gpuenv fleet verify --slurm --partition gpu --nodelist 'gpu[001-128]'  # one srun task per node

\b
Each host runs the gpuenv that gpuenv provision installed (--venv), as one command (over SSH,
or as an srun task with --slurm); its report comes back as REPORTS-DIR/HOST.json, and every
host's outcome (certified, not certified, could not run, unreachable, timeout, not provisioned)
goes to REPORTS-DIR/fleet-verify.json.
Exit codes: 0 every host certified, 1 a host was not, 2 bad request, 3 Ansible (or srun) missing or broken here.
"""
DEFAULT = FleetVerifyRequest()
FILE = click.Path(dir_okay=False, path_type=Path)
DIR = click.Path(file_okay=False, path_type=Path)

FLEET_EPILOG = """\b
Examples:
  gpuenv fleet verify -i hosts.ini --level standard   # certify every host of an inventory
  gpuenv fleet report reports/20261130T150405Z/       # compare their reports, flag the outliers
  gpuenv fleet baseline learn reports/ -o b.json      # expected figures from healthy hosts
  gpuenv fleet history --list                         # every host and GPU the history remembers

\b
Exit codes: 0 ok, 1 a host or a report is bad, 2 bad request, 3 gpuenv could not run (each
command's --help says which).
"""


@click.group("fleet", epilog=FLEET_EPILOG)
def fleet() -> None:
    """Many nodes: verify them over Ansible or Slurm, compare them, remember every GPU."""


@fleet.command("verify", epilog=VERIFY_EPILOG)
@host_options
@verify_option("level", "How thorough each host's verify is.")
@verify_option("check", "Only this check (repeatable; a site check as site.NAME).")
@verify_option("checks-dir", "The site's checks directory on the hosts, for verify --checks-dir (not copied).")
@verify_option("plugin", "A site check installed on the hosts as an entry point, for verify --plugin (repeatable).")
@verify_option("all-plugins", "Every site check installed on the hosts as an entry point (verify --all-plugins).")
@verify_option("device", "Device verify certifies on the hosts.")
@verify_option("expect-gpus", "Fail a host with fewer GPUs.")
@verify_option("strict", "Warnings make a host not certified.")
@click.option(
    "--passive", is_flag=True, help="With --check nvml: each host reads NVML without load (verify --passive)."
)
@click.option("--baseline", type=FILE, help="Baseline file, sent to each host for verify --baseline.")
@click.option("--policy", type=FILE, help="NVML policy file, sent to each host for verify --policy.")
@verify_option("image", "Certify this image.")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.IntRange(60, 86400),
    default=DEFAULT.timeout_s,
    show_default=True,
    help="Seconds the whole run may take.",
)
@click.option(
    "--host-timeout",
    "host_timeout_s",
    type=click.IntRange(10, 86400),
    default=DEFAULT.host_timeout_s,
    show_default=True,
    help="Seconds one host's verify may take.",
)
@verify_option(
    "timeout", "Seconds one check may take (verify --timeout) [default: per check and level].", flag="--check-timeout"
)
@click.option(
    "--multi-node",
    is_flag=True,
    help="One allreduce across every host (the first hosts the rendezvous): intra- and inter-node busbw.",
)
@click.option(
    "--master-port",
    type=click.IntRange(1, 65535),
    default=DEFAULT.master_port,
    show_default=True,
    help="With --multi-node: the rendezvous port on the first host.",
)
@click.option("--slurm", is_flag=True, help="Fan out as one srun step (a task per node) instead of over Ansible.")
@click.option(
    "--nodelist", metavar="LIST", help="With --slurm: these nodes, e.g. gpu[001-128] [default: the partition's]."
)
@click.option(
    "--partition", callback=checked(validate.slurm_partition), help="With --slurm: srun's partition [default: Slurm's]."
)
@click.option("--venv", default=DEFAULT.venv, show_default=True, help="The venv gpuenv provision made on the hosts.")
@click.option("--reports-dir", type=DIR, help="Where reports land as HOST.json [default: reports/<UTC time>].")
@click.option("--retry-failed", type=DIR, metavar="DIR", help="Only the hosts not certified in that earlier run.")
@history_options
@click.option("--artifacts-dir", type=DIR, help="Keep ansible-runner's working directory (events, output) here.")
@click.option("--json", "as_json", is_flag=True, help="The outcome per host as JSON on stdout.")
@click.pass_context
def verify(ctx: click.Context, /, as_json: bool, **params: Any) -> int:
    """Certify HOSTS (or an inventory's, or Slurm's nodes) with the gpuenv installed on each; collect the reports."""
    site = site_request(params)
    request = FleetVerifyRequest(hosts=hosts_request(params), history=history_path(params), site=site, **params)
    plan = prepare(request, prompt=become_prompt)
    board = FleetBoard(total=len(plan.targets))
    click.echo(f"fleet verify: {board.total} hosts, reports in {plan.reports_dir}", err=True)
    result = run(plan, on_host=lambda h: _progress(board, h, quiet=settings(ctx).quiet))
    for note in result.history_notes:
        warn(f"not recorded in the history: {note}")
    if as_json:
        emit_json(result.to_dict())
    else:
        _print_result(result)
    return result.exit_code


def _progress(board: FleetBoard, host: HostOutcome, *, quiet: bool) -> None:
    line = board.add(host)
    if not quiet:
        click.echo(printable(line), err=True)


def _print_result(result: FleetVerifyResult) -> None:
    if result.status == "nothing to retry":
        click.echo(f"every host was certified in that run: nothing to retry ({result.reports_dir})")
        return
    rows = [
        (h.host, h.outcome, h.report or "-", printable(_why(h.outcome, h.message, result.hints))) for h in result.hosts
    ]
    out = console()
    out.print(table(("host", "outcome", "report", "why"), rows, title="gpuenv fleet verify"))
    counts = ", ".join(f"{n} {outcome}" for outcome, n in result.counts().items())
    click.echo(f"{len(result.hosts)} hosts: {counts}; reports in {result.reports_dir}")
    if result.fleet is not None:
        click.echo()
        draw(output.screen("fleet", result.fleet), out)


WHY_LIMIT = 100  # characters of a host's message in the why column; the report has it whole


def _why(outcome: str, message: str | None, hints: dict[str, str] = HINTS) -> str:
    if outcome == "certified":
        return ""
    hint = hints.get(outcome)
    text = shortened(message or "", WHY_LIMIT)
    return f"{text} ({hint})" if hint and hint not in text else text


for command in (report, baseline, compat):
    fleet.add_command(command)


@fleet.command("history")
@click.argument("key", required=False)
@click.option(
    "--history", type=FILE, metavar="FILE", help="GPU history [default: $XDG_STATE_HOME/gpuenv/history.sqlite]."
)
@click.option("--list", "as_list", is_flag=True, help="List the hosts and GPUs the history holds, instead of a KEY.")
@click.option("--json", "as_json", is_flag=True, help="The timeline (or the --list) as JSON on stdout.")
def history(key: str | None, history: Path | None, as_list: bool, as_json: bool) -> int:
    """The timeline of a GPU (by UUID or serial) or of a host: every report the history holds.

    \b
    Examples:
      gpuenv fleet history --list
      gpuenv fleet history GPU-8f2c1d3e-...   # or a serial, or a host name
    Exit codes: 0 shown, 2 bad request (no KEY and no --list, a KEY the history does not hold, an
    unreadable history), 3 gpuenv crashed.
    """
    path = history or config.history_file()
    if as_list == (key is not None):
        raise BadRequest(
            "give a KEY (a GPU UUID, a serial or a host name) or --list", hint="gpuenv fleet history --list"
        )
    if key is None:
        hosts, gpus = store.listing(path)
        if as_json:
            emit_json(
                {"schema": "gpuenv.fleet-history-list/1", "hosts": [h.to_dict() for h in hosts]}
                | {"gpus": [g.to_dict() for g in gpus]}
            )
        else:
            _print_listing(path, hosts, gpus)
        return 0
    kind, rows = store.timeline(path, key)
    if not rows:
        raise BadRequest(f"{key} is not in the history {path}", hint="gpuenv fleet history --list shows what it holds")
    if as_json:
        emit_json({"schema": "gpuenv.fleet-history/1", "key": key, "kind": kind, "rows": [r.to_dict() for r in rows]})
    else:
        _print_timeline(key, kind, rows)
    return 0


def _print_listing(path: Path, hosts: list[store.HostSeen], gpus: list[store.GpuSeen]) -> None:
    noted = [g for g in gpus if g.events or g.failed]
    for title, rows in ((f"hosts in {path}", hosts), ("GPUs that failed or have events", noted)):
        if rows:
            columns = tuple(k.replace("_", " ") for k in rows[0].to_dict())
            cells = ([printable(str(v if v is not None else "-")) for v in r.to_dict().values()] for r in rows)
            console().print(table(columns, cells, title=title))
    newest = max((h.last_seen for h in hosts), default="-")[:10]
    unwell = sum(1 for h in hosts if h.last_outcome != "certified")
    ahead = [h.host for h in hosts if h.future_dated]
    future = f"; future-dated reports (ahead of this machine's clock) from {', '.join(ahead)}" if ahead else ""
    click.echo(
        f"{len(hosts)} host(s) ({unwell} not certified last), {len(gpus)} GPU(s); {len(noted)} failed or have "
        f"events; newest report {newest}{future} (--json lists all)"
    )


def _print_timeline(key: str, kind: str, rows: list[Any]) -> None:
    columns = ("started (UTC)", "host", "outcome", "gpu", "uuid", "serial", "bus id", "gpu findings", "report findings")
    drawn = [
        (
            r.started[:19].replace("T", " "),
            r.host,
            r.outcome,
            "-" if r.gpu_index is None else str(r.gpu_index),
            r.uuid or "-",
            r.serial or "-",
            r.bus_id or "-",
            ("FAILED " if r.gpu_failed else "") + ", ".join(r.gpu_codes),
            ", ".join(r.report_codes),
        )
        for r in rows
    ]
    console().print(table(columns, ([printable(c) for c in row] for row in drawn), title=f"{kind} {key}"))
