"""Presentation helpers shared by the commands (rich is imported only when a table is drawn)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import click


def emit_json(obj: Any) -> None:
    """One JSON object on stdout."""
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def warn(text: str) -> None:
    """A warning on stderr, whatever --quiet says."""
    click.secho(f"warning: {printable(text)}", fg="yellow", err=True)


def printable(text: str) -> str:
    """Text for a terminal: control characters (escape sequences included) become visible escapes."""
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in text)


def console(*, stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Off a terminal rich would wrap at 80 columns; a pipe or a log file reads better unwrapped.
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else 200)


def table(columns: Sequence[str], rows: Iterable[Sequence[str]], *, title: str | None = None, **style: Any) -> Any:
    """A rich Table of strings."""
    from rich.table import Table

    drawn = Table(title=title, **style)
    for column in columns:
        drawn.add_column(column)
    for row in rows:
        drawn.add_row(*row)
    return drawn
