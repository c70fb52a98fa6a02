"""`gpuenv verify`: certify this node, or an image, with a real PyTorch workload."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from gpuenv import output, processes, validate
from gpuenv.cli import settings as settings_of
from gpuenv.cli.output import console, emit_json, say, warn
from gpuenv.cli.params import checked, gpu_indices, on_disk, output_option, site_options, site_request, verify_option
from gpuenv.cli.verify_view import RunView, present, show_checks
from gpuenv.errors import BadRequest
from gpuenv.files import STDOUT, refuse_inputs
from gpuenv.output.verify import LOG_WIDTH
from gpuenv.verify.inputs import unpacked
from gpuenv.verify.launch import LAUNCHER_CHOICES, Explicit
from gpuenv.verify.options import SiteOptions
from gpuenv.verify.prices import price_rows
from gpuenv.verify.service import VerifyOutcome, VerifyRequest, checks_overview, preview
from gpuenv.verify.service import verify as run

EPILOG = """\b
Examples:
  gpuenv verify                              # quick level, GPUs if the node has any
  gpuenv verify --level standard --expect-gpus 8 --report /var/log/gpuenv/verify.json
  gpuenv -q verify --prometheus /var/lib/node_exporter/textfile/gpuenv.prom
  gpuenv verify --device cpu --check allreduce --json
  gpuenv verify --image gpuenv/pytorch:2.4.1-cu121-py3.11-ubuntu22.04-runtime
  gpuenv verify --level deep --price-per-hour 32.77 --json   # with cost per TFLOP-hour, token, image

\b
Across nodes (--check allreduce; the launcher is recognised from its environment):
  srun --ntasks-per-node 8 gpuenv verify --check allreduce      # SLURM_PROCID/NTASKS/LOCALID
  torchrun --nnodes 2 --nproc-per-node 8 ... -m gpuenv verify --check allreduce
  gpuenv verify --check allreduce --nnodes 2 --node-rank 0 --master-addr gpu001   # no launcher

\b
Levels: quick (Slurm prolog, <= 30 s on 8 GPUs), standard (epilog, after provisioning, <= 3 min),
deep (acceptance, <= 15 min).
Exit codes: 0 certified (warnings, and skips beside a pass, allowed; --strict makes a warning 1),
1 not certified (a check failed, timed out or crashed), 2 bad request, 3 could not run: no check
could (every one skipped, e.g. --check nvml --passive on a machine without a GPU), one could not
(no torch: pip install 'gpuenv[verify]'), interrupted, or gpuenv crashed.
"""


def _in_file(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    return None if value is None else validate.existing_file(value, f"--{param.name}")


EXPLICIT_KEYS = ("nnodes", "node_rank", "master_addr", "master_port", "node_name")


# --launcher, the explicit placement where no launcher is present, and rank 0's job summary
MULTI_NODE_OPTIONS = (
    click.option(
        "--launcher",
        type=click.Choice(LAUNCHER_CHOICES),
        default="auto",
        show_default=True,
        help="Across nodes with --check allreduce: auto recognises srun (SLURM_PROCID) and torchrun "
        "(RANK, MASTER_ADDR); none runs on this node alone.",
    ),
    click.option("--nnodes", type=click.IntRange(min=1), metavar="N", help="Nodes in the run (no launcher)."),
    click.option("--node-rank", type=click.IntRange(min=0), metavar="R", help="This node's rank, 0..N-1."),
    click.option(
        "--master-addr",
        metavar="HOST",
        callback=checked(validate.hostname),
        help="Host of node rank 0, where the rendezvous store listens.",
    ),
    click.option(
        "--master-port",
        type=click.IntRange(1, 65535),
        metavar="PORT",
        help="Port of the rendezvous store (default: 29500; under srun, from the job id).",
    ),
    click.option(
        "--node-name",
        metavar="NAME",
        callback=checked(validate.hostname),
        help="How reports name this node (default: the Slurm node name or the hostname).",
    ),
    output_option("--job-summary", "Rank 0 writes the whole run's summary here (across nodes)."),
)


def multi_node_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options of a run across nodes, in the order --help lists them."""
    for option in reversed(MULTI_NODE_OPTIONS):
        func = option(func)
    return func


@click.command("verify", epilog=EPILOG)
@verify_option("level", "How thorough the run is.")
@verify_option("check", "Run only this check (repeatable; a site check as site.NAME).")
@site_options
@verify_option("device", "auto: CUDA when an NVIDIA GPU is on the PCI bus or NVML loads, else CPU only.")
@verify_option("expect-gpus", "Fail when fewer GPUs are visible.")
@verify_option("strict", "Treat warnings as failures (exit 1).")
@click.option(
    "--gpus",
    metavar="LIST",
    callback=checked(gpu_indices),
    help="Only these GPUs, by NVML index as nvidia-smi shows them (like dcgmi diag -i), e.g. 0,3.",
)
@click.option("--list-checks", is_flag=True, help="List each level's checks, limits and what each proves; run none.")
@click.option(
    "--passive",
    is_flag=True,
    help="Read NVML (AMD SMI) in this process, no load, torch or worker (the Slurm epilog); implies --check nvml.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@output_option("--report", "Write the JSON report here (atomically, also when interrupted; - for stdout).")
@output_option("--junit", "Write JUnit XML here (one testcase per check; - for stdout).")
@output_option("--prometheus", "Write a node_exporter textfile here (atomically, world-readable; - for stdout).")
@click.option(
    "--artifacts",
    type=click.Path(path_type=Path, file_okay=False),
    metavar="DIR",
    help="Folder for artifacts (profiler trace); default: beside --report.",
)
@click.option(
    "--baseline", metavar="FILE", callback=on_disk(_in_file), help="Expected busbw/TFLOP/s table (see docs/verify.md)."
)
@click.option(
    "--policy",
    metavar="FILE",
    callback=on_disk(_in_file),
    help="NVML policy: severities, XID lists (see docs/verify.md).",
)
@click.option("--inputs", metavar="FILE", hidden=True, help="--policy and --baseline as one JSON document (- stdin).")
@verify_option("timeout", "Seconds allowed to each check (default: per check and level).")
@verify_option("image", "Run the same verify inside this Docker image instead.")
@click.option(
    "--price-per-hour",
    type=float,
    metavar="USD",
    callback=checked(validate.price),
    help="What the GPUs measured cost per hour: adds cost figures to the report (see docs/cost.md).",
)
@click.option(
    "--instance-type",
    metavar="NAME",
    callback=checked(validate.instance_type),
    help="This node's instance type: its [prices] entry, and its group in fleet tables.",
)
@multi_node_options
@click.pass_context
def verify(ctx: click.Context, /, as_json: bool, list_checks: bool, inputs: str | None, **options: Any) -> int:
    """Certify this node (or, with --image, an image) for PyTorch work."""
    site = site_request(options)
    if list_checks:
        return show_checks(checks_overview(VerifyRequest(site=site)), as_json=as_json)
    if inputs is None:
        return _verify(ctx, as_json, options, site)
    with unpacked(inputs) as files:  # fleet verify's one command per host: the files come on stdin
        if given := [f"--{name}" for name in files if options[name] is not None]:
            raise BadRequest(f"--inputs and {given[0]} exclude each other", hint="give the file one way")
        return _verify(ctx, as_json, {**options, **files}, site)


def _verify(ctx: click.Context, as_json: bool, options: dict[str, Any], site: SiteOptions) -> int:
    settings = settings_of(ctx)
    on_stdout = _one_stdout(as_json=as_json, **{k: options[k] for k in ("report", "junit", "prometheus")})
    outputs = {f"--{k.replace('_', '-')}": options[k] for k in ("report", "junit", "prometheus", "job_summary")}
    refuse_inputs(outputs, [options["baseline"], options["policy"]])
    explicit = Explicit(**{k: options.pop(k) for k in EXPLICIT_KEYS})
    options["gpus"] = options["gpus"] or ()
    options["checks"] = options["checks"] or (("nvml",) if options["passive"] else ())
    request = VerifyRequest(
        kb=settings.data, explicit=explicit, prices=price_rows(settings.config), site=site, **options
    )
    # the header, the checks as they run, the report: one stream (none with --json: nothing is drawn)
    out = None if as_json else console(stderr=on_stdout, log_width=LOG_WIDTH)
    shown = not (as_json or settings.quiet or request.image)
    # The engine turns the first SIGINT/SIGTERM into a partial report; any signal after it is only
    # noted, so a second Ctrl-C cannot stop the report the run promised from being written.
    with processes.Deferred() as late:
        outcome, view = _run_shown(request, out) if shown else (run(request), None)
        if outcome.report is not None:
            _present(outcome, as_json=as_json, quiet=settings.quiet, out=out, view=view)
        elif outcome.image_report is not None:
            _present_image(str(request.image), outcome.image_report, outcome.exit_code, as_json=as_json)
    for note in outcome.notes:
        warn(note)
    for problem in outcome.unwritten:  # named after the verdict, which is shown in any case
        click.echo(f"gpuenv: error: {problem}", err=True)
    if late.signal and outcome.report is not None and not outcome.report.interrupted:
        # every check had finished: the signal cut nothing short, so the verdict, the exit code and
        # the report written meanwhile say the same
        click.echo(f"gpuenv: {late.signal} came after the checks had finished: the verdict and report stand", err=True)
    return outcome.exit_code


def _run_shown(request: VerifyRequest, out: Any) -> tuple[VerifyOutcome, RunView | None]:
    """The run, its header shown once it starts and each check while it runs (by the view returned)."""
    found = preview(request)
    if not found.leads_node:  # another process of this node's ranks shows the run
        return run(request), None
    with RunView(out, found) as view:
        return run(request, on_result=view.finished, on_start=view.started), view


def _one_stdout(*, as_json: bool, **outputs: Path | None) -> bool:
    """At most one thing on standard output; True when an output file is `-`."""
    to_stdout = [f"--{name}" for name, path in outputs.items() if path is not None and _is_stdout(path)]
    if len(to_stdout) > 1 or (to_stdout and as_json):
        both = ", ".join(to_stdout + (["--json"] if as_json else []))
        raise BadRequest(f"{both} would all write to standard output", hint="send one of them to a file")
    return bool(to_stdout)


STDOUT_NAMES = (STDOUT, "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def _is_stdout(path: Path) -> bool:
    """`-` or a name of standard output's descriptor: the header, the checks and the table go to stderr."""
    return str(path) in STDOUT_NAMES


def _present(outcome: VerifyOutcome, *, as_json: bool, quiet: bool, out: Any, view: RunView | None) -> None:
    report = outcome.report
    assert report is not None
    if as_json:
        sys.stdout.write(output.text("verify", "json", report))
    elif not outcome.leads_node:  # another rank presents the report; this one speaks only of a failure
        if not report.verdict.certified:
            click.echo(report.verdict.summary, err=True)
    elif quiet:
        say(out, report.verdict.summary)
    elif view is not None:
        view.present(report)
    else:
        present(report, out, headed=False)


def _present_image(tag: str, data: dict[str, Any], code: int, *, as_json: bool) -> None:
    if as_json:
        emit_json(data)
        return
    for check in data.get("checks", []):
        click.echo(f"  {check['name']:<10} {check['status']:<8} {check.get('summary', '')}")
    click.echo(f"{tag}: {data.get('verdict', {}).get('summary', f'exit {code}')}")
