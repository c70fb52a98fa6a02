"""Presentation helpers shared by the commands (rich is imported only when a table is drawn)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click


def emit_json(obj: Any) -> None:
    """One JSON object on stdout."""
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def console(*, stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def is_tty() -> bool:
    return sys.stdout.isatty()
