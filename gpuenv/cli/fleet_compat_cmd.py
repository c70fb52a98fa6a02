"""`gpuenv fleet compat`: will this stack, image or lockfile run on every host of the fleet?"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gpuenv import output
from gpuenv.cli import settings
from gpuenv.cli.fleet_params import max_age_option, source_of
from gpuenv.cli.output import draw, warn
from gpuenv.cli.stack_params import stack_options, stack_request
from gpuenv.errors import BadRequest
from gpuenv.fleet.compat import CompatRequest, fleet_compat
from gpuenv.fleet.rollout import Rollout

EPILOG = """\b
Examples:
  gpuenv fleet compat reports/ --torch 2.7.0+cu128
  gpuenv fleet compat reports/ --stack stack.json --json
  gpuenv fleet compat --history ~/.local/state/gpuenv/history.sqlite --image registry/train:2.7
  gpuenv fleet compat reports/ --requirements pylock.toml --markdown >> "$GITHUB_STEP_SUMMARY"
  gpuenv fleet compat reports/ --stack stack.json --on-host     # as provision --stack installs it

\b
Each host is judged from its newest verify report (its GPUs' compute capability or gfx target, its
driver, its CPU architecture, its OS and Python) by the rules `resolve` applies: GPU code in the
build, a driver that runs its CUDA, the CPU architecture; for a stack installed on the host
(--requirements, --on-host) a Python its OS can give and an OS its platform is served on; for an image
(--image, or --stack and the options without --on-host) its nvidia/cuda base's cuda-compat, which runs
a newer CUDA on a data center GPU on the branches NVIDIA lists and fails on a GeForce. A caveat: PTX JIT,
minor-version or forward compatibility, a stack resolved for another OS, a report that does not record
the architecture or the OS. A host whose newest report is older than --max-age, dated ahead of
the clock, or unreadable is unknown, never "runs".
Exit codes: 0 every host runs it (caveats allowed unless --strict), 1 a host does not run it or is
unknown, 2 bad request (no report, an image without gpuenv's labels, a lockfile without torch),
3 could not run (Docker unreachable for --image).
"""


@click.command("compat", epilog=EPILOG)
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--history",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="DB",
    help="Judge the hosts of this GPU history (each one's newest report) instead of report folders.",
)
@click.option("--image", metavar="REF", help="An image built by gpuenv build-image: its labels name its stack.")
@click.option(
    "--requirements",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="A requirements file (torch==2.7.0+cu128, or a pin and its --index-url), pylock.toml or uv.lock.",
)
@stack_options
@click.option(
    "--on-host",
    is_flag=True,
    help="The stack (--stack FILE or the options) is installed on the host, as provision installs it: judge the "
    "host's OS and Python too. --requirements is always a host install; an --image never is.",
)
@max_age_option("--max-age")
@click.option("--strict", is_flag=True, help="Exit 1 when a host runs it only with a caveat, too.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON (gpuenv.fleet-compat/1).")
@click.option("--markdown", is_flag=True, help="Print the verdicts as Markdown.")
@click.pass_context
def compat(ctx: click.Context, /, paths: tuple[Path, ...], history: Path | None, **params: Any) -> int:
    """Check a stack, an image or a lockfile against every host of a fleet: runs, with a caveat, or not, and why."""
    as_json, markdown = params.pop("as_json"), params.pop("markdown")
    if as_json and markdown:
        raise click.UsageError("--json and --markdown exclude each other")
    source = source_of(paths, history, params.pop("max_age"), names=("PATHS", "--history"))
    if source is None:
        raise BadRequest(
            "give the fleet: folders of verify reports, or --history DB",
            hint="gpuenv fleet compat reports/ --stack stack.json",
        )
    image, lockfile, strict, on_host = (params.pop(k) for k in ("image", "requirements", "strict", "on_host"))
    rollout = Rollout(stack_request(params), image, lockfile, on_host)
    if not rollout.given():
        raise BadRequest(
            "nothing to check: give --stack, --image, --requirements or the stack options",
            hint="e.g. --torch 2.7.0+cu128",
        )
    result = fleet_compat(CompatRequest(source, rollout, strict), kb_path=settings(ctx).data)
    for w in result.warnings:
        warn(w)
    if as_json or markdown:
        click.echo(output.text("fleet-compat", "json" if as_json else "markdown", result), nl=False)
    elif not settings(ctx).quiet:
        draw(output.screen("fleet-compat", result))
    else:
        click.echo(result.summary())
    return result.exit_code
