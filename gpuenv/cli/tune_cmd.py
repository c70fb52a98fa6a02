"""`gpuenv tune power`: the most efficient power cap per GPU, and the original limits always back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gpuenv import validate
from gpuenv.cli.output import console, emit_json, table
from gpuenv.cli.params import checked, choice
from gpuenv.errors import BadRequest
from gpuenv.power import service
from gpuenv.types import DEVICE_CHOICES, LEVELS

EPILOG = """\b
Examples:
  sudo gpuenv tune power                      # measure every GPU at 5 caps, report, change nothing
  sudo gpuenv tune power --max-loss 3% --apply   # keep the most efficient cap within 3% of peak
  sudo gpuenv tune power --restore            # put back the limits a killed run left changed

\b
A cap set with --apply lasts until a reboot, a GPU reset or the next change; `--restore` undoes it.
Exit codes: 0 done (limits back, or the chosen caps kept with --apply), 1 the workload failed or a
limit could not be put back, 2 bad request (also: a state file says a limit is still changed; not
root), 3 could not run (no NVML, no CUDA torch, interrupted — the limits are put back first).
"""

DEVICE_HELP = (
    "Where the NLP step runs. cpu: on the CPU, for a GPU node whose torch has no CUDA (tries the caps, "
    "measures no efficiency); the GPUs' limits are stepped all the same, so a GPU is needed."
)


@click.group("tune", epilog=EPILOG)
def tune() -> None:
    """Tune this node's GPUs for efficiency (see docs/power.md)."""


@tune.command("power", epilog=EPILOG)
@click.option("--max-loss", default="5%", show_default=True, callback=checked(validate.percent), metavar="PERCENT",
              help="Throughput the chosen cap may give up against the fastest cap.")  # fmt: skip
@click.option("--steps", type=click.IntRange(2, 20), default=5, show_default=True, help="Caps tried per GPU.")
@click.option("--level", **choice(LEVELS, "standard"), help="How long the NLP step runs at each cap.")
@click.option("--device", **choice(DEVICE_CHOICES, "auto"), help=DEVICE_HELP)
@click.option("--gpu", "gpus", type=click.IntRange(min=0), multiple=True, metavar="INDEX",
              help="Only this GPU, by NVML index (repeatable).")  # fmt: skip
@click.option("--timeout", type=float, default=300.0, show_default=True, callback=checked(validate.seconds),
              metavar="SECONDS", help="Seconds allowed to the step at one cap.")  # fmt: skip
@click.option("--apply", is_flag=True, help="Keep the chosen cap on each GPU (recorded in the state file).")
@click.option("--restore", is_flag=True, help="Put back the limits the state file holds, and nothing else.")
@click.option("--state-file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="[default: $XDG_STATE_HOME/gpuenv/…, else /var/lib/gpuenv/power-state.json for root]")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def power(restore: bool, as_json: bool, state_file: Path | None, **options: Any) -> int:
    """Step each GPU's power limit, run the NLP training step at each, report tokens per joule."""
    if restore and options["apply"]:
        raise BadRequest("--restore and --apply exclude each other", hint="--restore puts back; --apply keeps a cap")
    if restore:
        outcome = service.restore(state_file)
        _present(outcome.to_dict(), as_json=as_json, lines=_restored(outcome.to_dict()))
        return 0
    options["gpus"] = tuple(options["gpus"])
    result = service.tune(service.TuneRequest(state_file=state_file, **options)).to_dict()
    _present(result, as_json=as_json, lines=None)
    return 0


def _restored(data: dict[str, Any]) -> list[str]:
    if not data["restored"]:
        return [f"nothing to restore: no state file at {data['state_file']}"]
    return [f"GPU {g['index']} ({g['uuid']}): back at {g['original_w']:g} W" for g in data["restored"]]


def _present(data: dict[str, Any], *, as_json: bool, lines: list[str] | None) -> None:
    if as_json:
        emit_json(data)
        return
    if lines is not None:
        for line in lines:
            click.echo(line)
        return
    out = console()
    for gpu in data["gpus"]:
        out.print(_gpu_table(gpu))
        choice_ = gpu["choice"] or {}
        out.print(f"  choice: {choice_.get('reason', '-')}", markup=False)
    if data["note"]:
        out.print(f"note: {data['note']}", markup=False)
    kept = "the chosen caps are kept (--apply)" if data["applied"] else "every GPU is back at its original limit"
    out.print(kept, markup=False)


def _gpu_table(gpu: dict[str, Any]) -> Any:
    def cell(value: Any, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    rows = [
        [
            f"{c['limit_w']:g}" + (" *" if c["limit_w"] == gpu["chosen_w"] else ""),
            cell(c["tokens_per_s"], ".4g"),
            cell(c["watts"], ".1f"),
            cell(c["tokens_per_j"], ".4g"),
            c["energy_source"] or "-",
        ]
        for c in gpu["caps"]
    ]
    title = f"GPU {gpu['index']} {gpu['name']} (original {gpu['original_w']:g} W, {gpu['min_w']:g}-{gpu['max_w']:g} W)"
    return table(["cap W", "tokens/s", "W", "tokens/J", "energy from"], rows, title=title, title_justify="left")
