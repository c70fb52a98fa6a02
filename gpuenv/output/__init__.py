"""One output mechanism: pure renderers, registered by subject and format name.

A renderer is one function from a subject (a verify `Report`, a `FleetReport`) to text; the
`table` format returns a `Screen` instead (tables and lines, no Rich), which the CLI draws.
Nothing here prints or writes: the CLI draws and prints, and `gpuenv.files.write_output` is the
one layer that writes a file (a regular file atomically, a FIFO or a character device through).

Renderers are named "module:function" and imported when first asked for, as the CLI's commands
are, so JUnit never imports the fleet's modules and nothing but `html` imports Jinja or matplotlib.
Adding a format is a function in the subject's module and a line in FORMATS (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any, Literal

from gpuenv.errors import CannotRun
from gpuenv.extras import install_hint
from gpuenv.files import Output, write_output
from gpuenv.output.screen import Screen

Subject = Literal["verify", "fleet", "fleet-compat"]

# subject -> format name -> "module:function"
FORMATS: dict[Subject, dict[str, str]] = {
    "verify": {
        "table": "gpuenv.output.verify:screen",
        "json": "gpuenv.output.verify:to_json",
        "junit": "gpuenv.output.junit:to_junit",
        "prometheus": "gpuenv.output.verify:to_prometheus",
        "job-summary": "gpuenv.output.verify:to_job_summary",
    },
    "fleet": {
        "table": "gpuenv.output.fleet:screen",
        "json": "gpuenv.output.fleet:to_json",
        "markdown": "gpuenv.output.fleet:to_markdown",
        "prometheus": "gpuenv.output.fleet:to_prometheus",
        "html": "gpuenv.output.html:to_html",
    },
    "fleet-compat": {
        "table": "gpuenv.output.fleet_compat:screen",
        "json": "gpuenv.output.fleet_compat:to_json",
        "markdown": "gpuenv.output.fleet_compat:to_markdown",
        "prometheus": "gpuenv.output.fleet_compat:to_prometheus",
    },
}

# (subject, format) -> (the optional library it needs, the extra that installs it)
NEEDS: dict[tuple[Subject, str], tuple[str, str]] = {
    ("fleet", "html"): ("matplotlib", "report"),
}


def require(subject: Subject, fmt: str) -> None:
    """Before any work: the optional library a format needs is installed (exit 3 naming the extra)."""
    needed = NEEDS.get((subject, fmt))
    if needed is None:
        return
    library, extra = needed
    try:
        import_module(library)
    except ImportError as exc:
        raise CannotRun(f"--{fmt} needs {library}, which is not installed", hint=install_hint(extra)) from exc


def renderer(subject: Subject, fmt: str) -> Callable[[Any], str | Screen]:
    """The registered function for a subject's format (a KeyError names an unknown one)."""
    module, name = FORMATS[subject][fmt].split(":")
    found: Callable[[Any], str | Screen] = getattr(import_module(module), name)
    return found


def text(subject: Subject, fmt: str, value: Any) -> str:
    """The subject in a text format (every format but `table`)."""
    rendered = renderer(subject, fmt)(value)
    if not isinstance(rendered, str):
        raise TypeError(f"{subject} {fmt} is drawn, not text: use screen()")
    return rendered


def screen(subject: Subject, value: Any) -> Screen:
    """The subject as the tables and lines a terminal shows (the `table` format)."""
    rendered = renderer(subject, "table")(value)
    if isinstance(rendered, str):
        raise TypeError(f"{subject} table rendered text, not a Screen")
    return rendered


def write(subject: Subject, fmt: str, value: Any, target: Output | str | Path, *, what: str = "output") -> None:
    """Render a text format and write it by gpuenv.files' one rule for output targets."""
    write_output(target, text(subject, fmt, value), what=what)
