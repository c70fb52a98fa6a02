"""What a terminal shows, as plain values: tables and lines of text, each piece with a style name.

The `table` renderers build a Screen; the CLI draws it with Rich (`gpuenv.cli.output.draw`). Text
is never markup: a `[` in a host name, a message or `pip install 'gpuenv[onnx]'` is shown as is. Nor
is it terminal control: host names, GPU names and file names come from reports anyone may write, so
every human format shows their escape sequences and newlines as visible escapes (`escaped`); JSON
keeps them exact.
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


def escaped(text: str, *, newlines: bool = True) -> str:
    """Text safe for a terminal or a Markdown line: each control character (ESC of an escape sequence,
    BEL, carriage return, a newline unless `newlines` is False, ...) becomes its visible escape, `\\x1b`."""
    if text.isprintable():  # the common case, at C speed
        return text
    return "".join(c if c.isprintable() or (c == "\n" and not newlines) else repr(c)[1:-1] for c in text)


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
