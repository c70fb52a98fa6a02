"""How `gpuenv verify` shows a run, on one stream: a header first, then a live line per running
check with its elapsed time (on a terminal), or one plain line per finished check (elsewhere, a
log reads it line by line), then the report's table and verdict."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuenv import output
from gpuenv.cli.output import console, draw, emit_json, printable, say, table
from gpuenv.output.screen import Table
from gpuenv.verify.model import CheckResult, Report
from gpuenv.verify.service import Preview


def header(preview: Preview) -> str:
    """The run's first line, from what is known before any worker starts."""
    checks = ", ".join(preview.checks)
    return f"gpuenv verify --level {preview.level} on {preview.host}: {preview.gpus}; checks: {checks}"


class RunView:
    """The checks as they run: a transient Rich progress line on a terminal, plain lines elsewhere."""

    def __init__(self, out: Any, preview: Preview) -> None:
        self.out = out
        self.total = len(preview.checks)
        self.done = 0
        self.progress: Any = None
        self.task: Any = None
        if out.is_terminal:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn  # start-up: rich

            columns = (SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn())
            self.progress = Progress(*columns, console=out, transient=True)

    def __enter__(self) -> RunView:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def started(self, name: str, limit_s: float) -> None:
        if self.progress is None:
            return
        if self.task is not None:
            self.progress.remove_task(self.task)
        about = f"{name:<10} running  (check {self.done + 1} of {self.total}, limit {limit_s:g} s)"
        self.task = self.progress.add_task(printable(about))

    def finished(self, result: CheckResult) -> None:
        self.done += 1
        if self.progress is not None:
            return  # the table that follows has the row: a terminal shows each check once
        line = f"  {result.name:<10} {result.status:<8} {result.duration_s:6.1f}s  {result.summary}"
        self.out.file.write(printable(line) + "\n")
        self.out.file.flush()


def present(report: Report, out: Any, *, headed: bool) -> None:
    """The report's screen; its title is left out when the header already named the run."""
    blocks = output.screen("verify", report)
    first = blocks[0] if blocks else None
    if headed and isinstance(first, Table):
        blocks = (dataclasses.replace(first, title=None), *blocks[1:])
    draw(blocks, out)


def show_checks(levels: list[dict[str, Any]], *, as_json: bool) -> int:
    """`gpuenv verify --list-checks`: each level's checks in the order they run, with limits, purpose and origin."""
    if as_json:
        emit_json({"levels": levels})
        return 0
    out = console()
    for level in levels:
        title = (
            f"{level['level']}: {len(level['checks'])} checks, aims for {level['target_s']:g} s on 8 GPUs "
            f"(limits add up to {level['worst_case_s']:g} s)"
        )
        rows = [
            (check["name"], f"{check['limit_s']:g} s", check["proves"], str(len(check["findings"])), check["origin"])
            for check in level["checks"]
        ]
        columns = ("check", "limit", "what it proves", "findings", "from")
        out.print(table(columns, rows, title=title, title_justify="left"))
    say(out, "Each check's finding codes: gpuenv verify --list-checks --json; how to read them: docs/verify.md")
    return 0
