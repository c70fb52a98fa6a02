"""How `gpuenv verify` shows a run, on one stream: a header once the run has started (a refused
request prints nothing), then a live line per running check with its elapsed time and the report's
table (on a terminal), or one plain line per finished check within 100 columns (elsewhere: a log
reads it line by line, and the table would repeat it); then the findings and the verdict."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuenv import output
from gpuenv.cli.output import console, draw, emit_json, printable, say, table
from gpuenv.output.screen import Table
from gpuenv.output.verify import check_log, log_tail, wrapped
from gpuenv.verify import registry
from gpuenv.verify.model import CheckResult, Report
from gpuenv.verify.service import Preview


def header(preview: Preview) -> str:
    """The run's first line, from what is known before any worker starts."""
    checks = ", ".join(preview.checks)
    return f"gpuenv verify --level {preview.level} on {preview.host}: {preview.gpus}; checks: {checks}"


class RunView:
    """The checks as they run: a transient Rich progress line on a terminal, a log's lines elsewhere."""

    def __init__(self, out: Any, preview: Preview) -> None:
        self.out = out
        self.preview = preview
        self.total = len(preview.checks)
        self.done = 0
        self.headed = False  # the header is shown once the run has started: a refusal prints nothing
        self.logged: set[tuple[str, str]] = set()  # (check, finding message) a log has shown
        self.progress: Any = None
        self.task: Any = None

    def __enter__(self) -> RunView:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def _head(self) -> None:
        if self.headed:
            return
        self.headed = True
        if self.out.is_terminal:
            say(self.out, header(self.preview), "bold")
        else:
            self._log("\n".join(wrapped(header(self.preview), 2)))

    def started(self, name: str, limit_s: float) -> None:
        self._head()
        if not self.out.is_terminal:
            if self.done == 0 and any(s.needs_torch for s in registry.select(self.preview.level, self.preview.checks)):
                self._log("  starting the checks' process: Python, then torch (a few seconds)")
            return
        if self.progress is None:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn  # start-up: rich

            columns = (SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn())
            self.progress = Progress(*columns, console=self.out, transient=True)
            self.progress.start()
        if self.task is not None:
            self.progress.remove_task(self.task)
        about = f"{name:<10} running  (check {self.done + 1} of {self.total}, limit {limit_s:g} s)"
        self.task = self.progress.add_task(printable(about))

    def finished(self, result: CheckResult) -> None:
        self._head()
        self.done += 1
        if self.out.is_terminal:
            return  # the table that follows has the row: a terminal shows each check once
        self._log(check_log(result))
        self.logged.update((result.name, finding.message) for finding in result.findings)

    def present(self, report: Report) -> None:
        """The report after the run: a terminal's screen (its title left out, the header named the
        run), or what a log has not shown yet (each check had its lines)."""
        if self.headed and not self.out.is_terminal:
            self._log(log_tail(report, self.logged))
        else:
            present(report, self.out, headed=self.headed)

    def _log(self, text: str) -> None:
        self.out.file.write(text + "\n")
        self.out.file.flush()


def present(report: Report, out: Any, *, headed: bool) -> None:
    """The report's screen; its title is left out when the header already named the run."""
    blocks = output.screen("verify", report)
    first = blocks[0] if blocks else None
    if headed and isinstance(first, Table):
        blocks = (dataclasses.replace(first, title=None), *blocks[1:])
    draw(blocks, out)


def show_checks(*, as_json: bool) -> int:
    """`gpuenv verify --list-checks`: each level's checks in the order they run, with limits and purpose."""
    levels = registry.levels_overview()
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
            (check["name"], f"{check['limit_s']:g} s", check["proves"], str(len(check["findings"])))
            for check in level["checks"]
        ]
        out.print(table(("check", "limit", "what it proves", "findings"), rows, title=title, title_justify="left"))
    say(out, "Each check's finding codes: gpuenv verify --list-checks --json; how to read them: docs/verify.md")
    return 0
