"""How an error is said, the same for every command: `gpuenv: error: MESSAGE` and `  hint: HINT` on
stderr, Click's usage errors included (their message, and Click's suggestion or the usage as the hint)."""

from __future__ import annotations

import click
from click.core import ParameterSource


def name_the_flag(exc: click.BadParameter) -> None:
    """A bad value names where it came from: the flag, unless it came from the environment
    (Click names an option's environment variable whenever --help shows it)."""
    param, ctx = exc.param, exc.ctx
    if param is None or ctx is None or exc.param_hint is not None or not param.name:
        return
    if ctx.get_parameter_source(param.name) != ParameterSource.ENVIRONMENT:
        exc.param_hint = " / ".join(f"'{name}'" for name in param.opts)


def said(exc: click.ClickException) -> tuple[str, str | None]:
    """Click's error in gpuenv's one-line form: its message, and as the hint Click's suggestion, else
    the command's usage (where it has one)."""
    if isinstance(exc, click.NoSuchOption) and exc.possibilities:
        names = ", ".join(repr(p) for p in exc.possibilities)
        return exc.message, f"did you mean {'one of: ' if len(exc.possibilities) > 1 else ''}{names}?"
    ctx = exc.ctx if isinstance(exc, click.UsageError) else None
    if ctx is None:
        return exc.format_message(), None
    usage = ctx.get_usage().removeprefix("Usage: ")
    return exc.format_message(), f"usage: {usage} (more: {ctx.command_path} --help)"


def print_error(message: str, hint: str | None) -> None:
    click.echo(f"gpuenv: error: {message}", err=True)
    if hint:
        click.echo(f"  hint: {hint}", err=True)
