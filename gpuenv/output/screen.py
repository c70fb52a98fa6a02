"""What a terminal shows, as plain values: tables and lines of text, each piece with a style name.

The `table` renderers build a Screen; the CLI draws it with Rich (`gpuenv.cli.output.draw`). Text
is never markup: a `[` in a host name, a message or `pip install 'gpuenv[onnx]'` is shown as is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True)
class Span:
    """A piece of text in one style (a Rich style name such as "bold red"; None: the default)."""

    text: str
    style: str | None = None


Cell: TypeAlias = str | Span


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    title: str | None = None
    title_left: bool = False
    right_aligned: tuple[str, ...] = ()  # columns whose cells line up on the right


@dataclass(frozen=True)
class Line:
    spans: tuple[Span, ...]


Block: TypeAlias = Table | Line
Screen: TypeAlias = tuple[Block, ...]


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Cell]],
    *,
    title: str | None = None,
    title_left: bool = False,
    right_aligned: Sequence[str] = (),
) -> Table:
    return Table(tuple(columns), tuple(tuple(r) for r in rows), title, title_left, tuple(right_aligned))


def line(*parts: str | Span) -> Line:
    """A line from plain strings and styled spans, in order."""
    return Line(tuple(p if isinstance(p, Span) else Span(p) for p in parts))
