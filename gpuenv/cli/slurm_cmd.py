"""`gpuenv slurm`: Slurm's HealthCheckProgram, prolog and epilog, and the slurm.conf lines for them."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from gpuenv import validate
from gpuenv.cli.params import checked, grammar, on_disk
from gpuenv.errors import BadRequest
from gpuenv.slurm import core
from gpuenv.slurm.install import install_hooks
from gpuenv.slurm.service import HookRequest, run_hook
from gpuenv.verify.registry import CHECKS

INSTALL_EPILOG = """\b
Examples:
  sudo gpuenv slurm install                 # /etc/slurm/gpuenv-{health-check,prolog,epilog}
  gpuenv slurm install --dest /opt/slurm/hooks --reports-dir /srv/gpuenv

\b
Each script is written atomically; a file of that name that gpuenv did not write is left alone and
the install refused (exit 2). Add the lines it prints to slurm.conf, then `scontrol reconfigure`.
Exit codes: 0 installed, 2 bad request (DIR is not a folder, a file there is not gpuenv's, paths
with spaces), 3 a script could not be written there (not root?) or gpuenv crashed.
"""
GROUP_EPILOG = """\b
Examples:
  sudo gpuenv slurm install                 # the three hook scripts in /etc/slurm, and the slurm.conf lines
  gpuenv slurm config                       # only print the slurm.conf lines
  gpuenv slurm health-check --max-time 50   # what HealthCheckProgram runs

\b
Exit codes: 0 ok, 1 the node is not healthy (drained), 2 bad request, 3 could not run (each
command's --help says which).
"""
HOOK_EPILOG = """\b
Examples:
  {example}
  gpuenv slurm install   # writes the script slurm.conf runs, /etc/slurm/gpuenv-{hook}

\b
Exit codes: 0 healthy{resumes} or nothing to check (no GPU: skip), 1 not healthy: the node is drained
with a `gpuenv:` reason, 2 bad request (nothing drained), 3 verify could not run: the node is drained
unless --no-drain-on-error (then left as it is).
"""
HOOK_EXAMPLES = {
    "health-check": "gpuenv slurm health-check --max-time 50 --expect-gpus 8",
    "prolog": "gpuenv slurm prolog --reports-dir /var/log/gpuenv   # keeps NODE-prolog-JOBID.json there",
    "epilog": "gpuenv slurm epilog --reports-dir /var/log/gpuenv",
}
CONFIG_EPILOG = """\b
Examples:
  gpuenv slurm config >> /etc/slurm/slurm.conf.d/gpuenv.conf
  gpuenv slurm config --script prolog > /etc/slurm/gpuenv-prolog   # one hook's script
Exit codes: 0 printed, 2 bad request (a path with spaces, --interval under 60), 3 gpuenv crashed.
"""
# hook -> (default level, default checks, default --max-time, help)
HOOKS = {
    "health-check": ("quick", (), 50.0, "HealthCheckProgram: verify; drain on a failure, resume gpuenv's drains."),
    "prolog": (
        "quick",
        ("nvml", "stack", "allreduce"),
        30.0,
        "Prolog: verify the job's GPUs; drain, exit 1 on a failure.",
    ),
    "epilog": (
        "quick",
        ("nvml",),
        30.0,
        "Epilog: what the job left on its GPUs (row remaps pending, processes, XIDs).",
    ),
}


@click.group("slurm", epilog=GROUP_EPILOG)
def slurm() -> None:
    """Slurm hooks that drain a bad node with a `gpuenv:` reason and resume only gpuenv's drains."""


# the options every hook has alike
SHARED_HOOK_OPTIONS = [
    click.option(
        "--reports-dir",
        callback=on_disk(grammar(validate.existing_dir, "--reports-dir")),
        metavar="DIR",
        help="Keep verify's report here as NODE-HOOK[-JOBID].json [default: none kept].",
    ),
    click.option("--expect-gpus", type=click.IntRange(min=1), metavar="N", help="Fail when fewer GPUs are visible."),
    click.option("--no-drain-on-error", is_flag=True, help="Exit 3 without draining when verify could not run."),
    click.option(
        "--node",
        metavar="NAME",
        callback=checked(validate.slurm_node),
        help="The node's NodeName [default: SLURMD_NODENAME, else the host name].",
    ),
]
MAX_TIME_HELP = "Seconds verify may take; past them the node is drained (slurmd kills a health check at 60)."


def _hook_options(hook: str) -> list[Callable[[Any], Any]]:
    level, checks, max_time, _ = HOOKS[hook]
    limit = core.HEALTH_CHECK_MAX_TIME if hook == "health-check" else 3600.0
    return [
        click.option(
            "--level",
            type=click.Choice(["quick", "standard", "deep"]),
            default=level,
            show_default=True,
            help="How thorough verify is (keep it within --max-time).",
        ),
        click.option(
            "--check",
            "checks",
            multiple=True,
            type=click.Choice([c.name for c in CHECKS]),
            help=f"Run only this verify check [default: {checks or 'all'}].",
        ),
        click.option(
            "--max-time",
            type=click.FloatRange(10, limit),
            default=max_time,
            show_default=True,
            metavar="S",
            help=MAX_TIME_HELP,
        ),
        *SHARED_HOOK_OPTIONS,
    ]


def _hook_command(hook: str) -> click.Command:
    checks, doc = HOOKS[hook][1], HOOKS[hook][3]

    def command(**opts: Any) -> int:
        opts["checks"] = tuple(opts["checks"]) or checks
        req = HookRequest(hook=hook, drain_on_error=not opts.pop("no_drain_on_error"), **opts)
        result = run_hook(req)
        click.echo(f"gpuenv slurm {hook}: {result.line()}", err=True)
        return result.exit_code

    command.__doc__ = doc
    decorated = functools.reduce(lambda f, option: option(f), reversed(_hook_options(hook)), command)
    resumes = " (a node gpuenv drained is resumed)" if hook == "health-check" else ""
    epilog = HOOK_EPILOG.format(example=HOOK_EXAMPLES[hook], hook=hook, resumes=resumes)
    return slurm.command(hook, epilog=epilog)(decorated)


for _hook in HOOKS:
    _hook_command(_hook)


@slurm.command("config", epilog=CONFIG_EPILOG)
@click.option("--scripts-dir", default="/etc/slurm", show_default=True, help="Where the hook scripts go.")
@click.option("--reports-dir", default="/var/log/gpuenv", show_default=True, help="Where verify reports go.")
@click.option(
    "--interval",
    type=click.IntRange(min=60),
    default=300,
    show_default=True,
    metavar="S",
    help="HealthCheckInterval: seconds between health checks.",
)
@click.option("--node-state", default="IDLE", show_default=True, help="HealthCheckNodeState.")
@click.option("--script", type=click.Choice(list(HOOKS)), help="Print this hook's script instead.")
def config(scripts_dir: str, reports_dir: str, interval: int, node_state: str, script: str | None) -> None:
    """Print the slurm.conf lines that wire gpuenv in (or, with --script, one hook's script)."""
    gpuenv = shutil.which("gpuenv") or "/usr/local/bin/gpuenv"
    req = core.ConfigRequest(gpuenv, scripts_dir, reports_dir, interval, node_state)
    try:
        lines = core.config_lines(req)
    except ValueError as exc:
        raise BadRequest(str(exc), hint="choose paths without spaces") from exc
    if script is None:
        click.echo("\n".join(lines))
        return
    click.echo(core.hook_script(gpuenv, script, reports_dir), nl=False)


@slurm.command("install", epilog=INSTALL_EPILOG)
@click.option(
    "--dest",
    default="/etc/slurm",
    show_default=True,
    callback=on_disk(grammar(validate.existing_dir, "--dest")),
    help="The folder the three scripts go into (slurm.conf names them there).",
)
@click.option("--reports-dir", default="/var/log/gpuenv", show_default=True, help="Where the hooks keep reports.")
def install(dest: Path, reports_dir: str) -> None:
    """Put the three hook scripts in place (mode 0755), then print the slurm.conf lines naming them."""
    gpuenv = shutil.which("gpuenv") or "/usr/local/bin/gpuenv"
    req = core.ConfigRequest(gpuenv, str(dest), reports_dir, 300, "IDLE")
    for done in install_hooks(dest, req):
        click.echo(f"{done.action}: {done.path}", err=True)
    click.echo("\n".join(core.config_lines(req)))
