"""docs/architecture.md's recipes, followed once each.

"Add a command": request → service → present. The command is defined here as a new one would be
in gpuenv (a frozen request, one service returning a typed result, a short Click command using the
shared options and `settings`), then registered in COMMANDS and driven through `gpuenv.cli.main`,
the one place exit codes are made.

"Add an output format": a renderer (a verify report as CSV) and its line in gpuenv.output.FORMATS,
written by gpuenv.files' one rule for output targets.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest

from gpuenv import cli, output
from gpuenv.cli.output import emit_json
from gpuenv.cli.stack_params import stack_options, stack_request
from gpuenv.errors import BadRequest, CannotRun
from gpuenv.stack_service import StackRequest, stack_for
from gpuenv.types import Level
from gpuenv.verify.model import CheckResult, Report, decide


# 1. Request: frozen, typed, the stack options as a StackRequest.
@dataclass(frozen=True)
class DriverAdviceRequest:
    stack: StackRequest = field(default_factory=StackRequest)
    level: Level = "quick"


# 2. Service: request in, typed result out; BadRequest with a hint for what Click cannot check.
@dataclass(frozen=True)
class DriverAdvice:
    torch: str
    branch: str
    floor: str

    def to_dict(self) -> dict[str, Any]:
        return {"torch": self.torch, "driver_branch": self.branch, "driver_floor": self.floor}


def advise(request: DriverAdviceRequest, *, kb_path: Path | None) -> DriverAdvice:
    stack = stack_for(request.stack, kb_path=kb_path)
    if request.level == "deep" and int(stack.driver_floor.split(".")[0]) < 525:
        raise BadRequest(f"driver floor {stack.driver_floor} predates R525", hint="resolve a newer --cuda")
    return DriverAdvice(stack.torch, stack.driver_branch, stack.driver_floor)


# 3. Click command: parse into the request, call the service, present; settings through cli.settings.
@click.command("driver-advice")
@stack_options
@click.option("--level", type=click.Choice(["quick", "standard", "deep"]), default="quick")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def driver_advice(ctx: click.Context, /, as_json: bool, **params: Any) -> int:
    """Which driver branch a stack wants."""
    advice = advise(DriverAdviceRequest(stack=stack_request(params), **params), kb_path=cli.settings(ctx).data)
    if as_json:
        emit_json(advice.to_dict())
    elif not cli.settings(ctx).quiet:
        click.echo(f"torch {advice.torch}: install {advice.branch} (at least {advice.floor})")
    return 0


# 4. Registration: the lazy group imports the command only when it runs.
def _register(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cli.COMMANDS, "driver-advice", cli.CommandEntry(f"{__name__}:driver_advice"))


def _main(*args: str) -> int:
    with pytest.raises(SystemExit) as exited:
        cli.main(list(args))
    return int(exited.value.code or 0)


def test_new_command_is_listed_and_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _register(monkeypatch)
    assert _main("--help") == 0
    assert "driver-advice" in capsys.readouterr().out
    assert _main("driver-advice", "--cuda", "12.4", "--json") == 0
    out = capsys.readouterr().out
    assert '"driver_branch": "R' in out and '"torch": "' in out


def test_new_command_gets_bad_requests_and_settings_the_common_way(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _register(monkeypatch)
    assert _main("driver-advice", "--cuda", "11.7", "--level", "deep") == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("gpuenv: error: driver floor 450.") and err[1].startswith("  hint: ")
    assert _main("driver-advice", "--cuda", "not-a-version") == 2
    assert _main("driver-advice", "--stack", str(tmp_path / "x.json"), "--cuda", "12.4") == 2
    capsys.readouterr()
    assert _main("-q", "driver-advice", "--cuda", "12.4") == 0
    assert capsys.readouterr().out == ""


# ---- "Add an output format" -----------------------------------------------------------------


# 1. Renderer: the subject in, text out; it neither prints nor writes.
def to_csv(report: Report) -> str:
    rows = [f"{check.name},{check.status},{check.duration_s:.1f}" for check in report.checks]
    return "\n".join(["check,status,seconds", *rows]) + "\n"


# 2. Registration: one line under its subject.
def _register_csv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(output.FORMATS["verify"], "csv", f"{__name__}:to_csv")


def _report() -> Report:
    checks = [CheckResult("nvml", "pass", 1.52), CheckResult("allreduce", "warn", 12.0)]
    verdict = decide(checks, strict=False, cpu_only=False, interrupted=None)
    started = "2026-11-30T15:04:05+00:00"
    return Report("quick", "cuda", False, started, started, "0.1.0", {"hostname": "gpu01"}, {}, checks, verdict)


CSV = "check,status,seconds\nnvml,pass,1.5\nallreduce,warn,12.0\n"


def test_new_format_renders_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    _register_csv(monkeypatch)
    assert output.renderer("verify", "csv") is to_csv
    assert output.text("verify", "csv", _report()) == CSV


# 3. Use: written by the one rule (a file atomically, a FIFO through, a directory refused).
def test_new_format_is_written_by_the_one_rule(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _register_csv(monkeypatch)
    target = tmp_path / "verify.csv"
    target.write_text("old")
    inode = target.stat().st_ino
    output.write("verify", "csv", _report(), target, what="--csv")
    assert target.read_text() == CSV and target.stat().st_ino != inode
    fifo = tmp_path / "verify.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader waits at the other end
    try:
        output.write("verify", "csv", _report(), fifo, what="--csv")
        assert os.read(reader, 1 << 16).decode() == CSV and stat.S_ISFIFO(fifo.lstat().st_mode)
    finally:
        os.close(reader)
    with pytest.raises(BadRequest, match=r"--csv .* is a directory"):
        output.write("verify", "csv", _report(), tmp_path, what="--csv")


def test_a_format_from_an_optional_extra_names_it_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    _register_csv(monkeypatch)
    monkeypatch.setitem(output.NEEDS, ("verify", "csv"), ("gpuenv_no_such_library", "csv"))
    with pytest.raises(CannotRun, match="--csv needs gpuenv_no_such_library") as info:
        output.require("verify", "csv")
    assert info.value.hint == "pip install 'gpuenv[csv]'"
