"""How the commands show things: JSON on stdout, warnings on stderr, and Rich drawing of tables
and of the screens gpuenv.output's `table` renderers build (text shown as is, never as markup)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

import click

from gpuenv.output.jsontext import json_text
from gpuenv.output.screen import Cell, Line, Screen, Span, Table, escaped


def emit_json(obj: Any) -> None:
    """One JSON object on stdout (non-finite figures as null)."""
    click.echo(json_text(obj), nl=False)


def warn(text: str) -> None:
    """A warning on stderr, whatever --quiet says."""
    click.secho(f"warning: {printable(text)}", fg="yellow", err=True)


def printable(text: str) -> str:
    """Text for a terminal: control characters (escape sequences included) become visible escapes."""
    return escaped(text, newlines=False)


def shortened(text: str, limit: int) -> str:
    """Text of at most `limit` characters, cut at a word with an ellipsis when longer (never mid-word,
    unless one word alone is longer than half the limit)."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def console(*, stderr: bool = False, log_width: int = 200) -> Any:
    from rich.console import Console  # start-up: rich loads only when something is drawn

    stream = sys.stderr if stderr else sys.stdout
    # Off a terminal rich would wrap at 80 columns; a pipe or a log file reads better at log_width.
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else log_width)


def say(out: Any, text: str, style: str = "") -> None:
    """One line of text on a Rich console, shown as is (never read as markup), control characters escaped."""
    out.print(_text(Line((Span(text, style or None),))))


def draw(screen: Screen, out: Any = None) -> None:
    """Print a renderer's screen on a Rich console (standard output's unless given)."""
    out = out if out is not None else console()
    for block in screen:
        if isinstance(block, Table):
            style = {"title_justify": "left"} if block.title_left else {}
            out.print(table(block.columns, block.rows, title=block.title, right_aligned=block.right_aligned, **style))
        else:
            out.print(_text(block))


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Cell]],
    *,
    title: str | None = None,
    right_aligned: Sequence[str] = (),
    **style: Any,
) -> Any:
    """A Rich Table of plain or styled cells."""
    from rich.table import Table as RichTable  # start-up: rich loads only when something is drawn
    from rich.text import Text  # start-up: as above

    drawn = RichTable(title=None if title is None else Text(escaped(title), style="table.title"), **style)
    for column in columns:
        drawn.add_column(escaped(column), justify="right" if column in right_aligned else "left")
    for row in rows:
        drawn.add_row(*(_text(Line((cell if isinstance(cell, Span) else Span(cell),))) for cell in row))
    return drawn


def _text(block: Line) -> Any:
    from rich.text import Text  # start-up: rich loads only when something is drawn

    return Text.assemble(*((escaped(span.text), span.style or "") for span in block.spans))
