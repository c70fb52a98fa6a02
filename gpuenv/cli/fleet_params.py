"""The fleet options of the commands that judge a stack against a fleet before acting (--fleet DIR,
--fleet-history DB, --fleet-max-age DAYS): resolve, build-image, provision; and `fleet compat`'s own spelling."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from gpuenv import validate
from gpuenv.cli.output import warn
from gpuenv.cli.params import F
from gpuenv.fleet.source import DEFAULT_MAX_AGE_DAYS, FleetSource, OnHost, check_rollout
from gpuenv.stack import Stack

# Judges the stack it is handed the making of, and how it is installed on a host (None: in an image).
Gate = Callable[[Callable[[], Stack], OnHost | None], object]


MAX_AGE_HELP = "A host whose newest report is older than this is unknown, never 'runs'."


def max_age_option(name: str) -> Callable[[F], F]:
    return click.option(
        name,
        "max_age",
        type=click.FloatRange(min=0, min_open=True),
        default=DEFAULT_MAX_AGE_DAYS,
        show_default=True,
        metavar="DAYS",
        help=MAX_AGE_HELP,
    )


def fleet_options(func: F) -> F:
    """Add --fleet DIR, --fleet-history DB and --fleet-max-age DAYS."""
    options = [
        click.option(
            "--fleet",
            "fleet_dir",
            type=click.Path(path_type=Path),
            metavar="DIR",
            help="The fleet's verify reports (a folder, as fleet report reads it): judge the stack against each host.",
        ),
        click.option(
            "--fleet-history",
            type=click.Path(dir_okay=False, path_type=Path),
            metavar="DB",
            help="The GPU history instead of --fleet: each host's newest report.",
        ),
        max_age_option("--fleet-max-age"),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


def rollout_options(func: F) -> F:
    """The fleet options, and --strict: refuse what part of the fleet cannot run (build-image, provision)."""
    strict = click.option(
        "--strict",
        is_flag=True,
        help="With --fleet: refuse (exit 2) when a host cannot run the stack, is unknown, or runs it with a caveat.",
    )
    return fleet_options(strict(func))


def rollout_gate(params: dict[str, Any], kb_path: Path | None) -> Gate:
    """Take the fleet options and --strict out of the parameters: what checks a stack against the fleet (installed
    on the host as `on_host` says; None: an image's)."""
    source, strict = fleet_source(params), params.pop("strict")
    if source is None:
        if strict:
            raise click.UsageError("--strict judges the stack against a fleet: give --fleet or --fleet-history")
        return lambda stack, on_host: None  # no fleet: the stack is not worked out for it
    return lambda stack, on_host: check_rollout(
        stack(), source, kb_path=kb_path, strict=strict, on_warning=warn, on_host=on_host
    )


def fleet_source(params: dict[str, Any]) -> FleetSource | None:
    """Take the fleet options out of a command's parameters: the fleet to judge, or None."""
    folder: Path | None = params.pop("fleet_dir")
    history: Path | None = params.pop("fleet_history")
    max_age: float = params.pop("max_age")
    return source_of((folder,) if folder else (), history, max_age, names=("--fleet", "--fleet-history"))


def source_of(
    paths: tuple[Path, ...], history: Path | None, max_age: float, *, names: tuple[str, str]
) -> FleetSource | None:
    if paths and history is not None:
        raise click.UsageError(f"{names[0]} and {names[1]} exclude each other")
    if history is not None:
        validate.safe_path(str(history), names[1])
    return FleetSource(paths, history, max_age) if paths or history is not None else None
