"""Presentation helpers shared by the commands (rich is imported only when a table is drawn)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click


def emit_json(obj: Any) -> None:
    """One JSON object on stdout."""
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def printable(text: str) -> str:
    """Text for a terminal: control characters (escape sequences included) become visible escapes."""
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in text)


def console(*, stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Off a terminal rich would wrap at 80 columns; a pipe or a log file reads better unwrapped.
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else 200)
