"""docs/architecture.md's "add a command" recipe, followed once: request → service → present.

The command is defined here as a new one would be in gpuenv (a frozen request, one service
returning a typed result, a short Click command using the shared options and `settings`), then
registered in COMMANDS and driven through `gpuenv.cli.main`, the one place exit codes are made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest

from gpuenv import cli
from gpuenv.cli.output import emit_json
from gpuenv.cli.params import stack_options, stack_request
from gpuenv.errors import BadRequest
from gpuenv.stacks import StackRequest, stack_for
from gpuenv.types import Level


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
    monkeypatch.setitem(cli.COMMANDS, "driver-advice", f"{__name__}:driver_advice")


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
