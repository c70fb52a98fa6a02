"""`gpuenv info`: this machine's GPUs, driver, torch and resolved stack, in about a second."""

from __future__ import annotations

import click

from gpuenv.cli import settings
from gpuenv.cli.output import emit_json, printable
from gpuenv.info import MachineInfo, machine_info, stack_line


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print it as one JSON object (schema gpuenv.info/1).")
@click.pass_context
def info(ctx: click.Context, as_json: bool) -> int:
    """This machine: GPUs, driver, CUDA, torch, NVML and the stack gpuenv resolves for it.

    \b
    Torch's version comes from its package metadata: torch is not imported, so this takes a second.
    Examples:
      gpuenv info
      gpuenv info --json | jq .stack.torch
    Exit codes: 0 shown (what cannot be read here is said, not an error), 2 bad request (a bad
    --data knowledge base), 3 gpuenv crashed.
    """
    found = machine_info(kb_path=settings(ctx).data)
    if as_json:
        emit_json(found.to_dict())
    else:
        click.echo("\n".join(printable(line) for line in lines(found)))
    return 0


def lines(found: MachineInfo) -> list[str]:
    """The facts, one per line, named on the left."""
    driver = found.driver or "none found"
    if found.cuda_driver:
        driver += f" (runs CUDA up to {found.cuda_driver})"
    rows = [
        ("host", f"{found.hostname} ({found.os or 'unknown OS'}, {found.cpu_arch}, Python {found.python})"),
        ("NVML", found.nvml),
        ("driver", driver),
        ("GPUs", _gpu_count(found.gpus)),
    ]
    rows += [("", _gpu_line(gpu)) for gpu in found.gpus]
    rows.append(("torch", found.torch or "not installed"))
    rows += _stack_rows(found)
    rows.append(("site", _site_checks(found.site_checks)))
    return [f"{name:<8} {value}".rstrip() for name, value in rows]


def _gpu_count(gpus: tuple[dict[str, object], ...]) -> str:
    """ "8 × NVIDIA H100 80GB HBM3", or each model's count where they differ."""
    if not gpus:
        return "none visible to NVML"
    names = [str(gpu.get("name")) for gpu in gpus]
    return ", ".join(f"{names.count(name)} × {name}" for name in dict.fromkeys(names))


def _gpu_line(gpu: dict[str, object]) -> str:
    capability = f"sm_{str(gpu.get('compute_capability') or '?').replace('.', '')}"
    return f"  {gpu.get('index')}  {gpu.get('name')}  {capability}  {gpu.get('pci_bus_id')}  {gpu.get('uuid')}"


def _stack_rows(found: MachineInfo) -> list[tuple[str, str]]:
    stack = found.stack
    if stack is None:
        return [("stack", f"not resolved: {found.stack_note}")]
    return [("stack", stack_line(stack)), ("", f"  from: {found.stack_note}")]


def _site_checks(points: tuple[dict[str, str | None], ...]) -> str:
    """The site checks installed as entry points; verify runs them with --plugin NAME or --all-plugins."""
    if not points:
        return "no site checks installed (entry points in gpuenv.checks)"
    named = ", ".join(f"{p['name']} ({p['distribution']} {p['version'] or '?'}: {p['value']})" for p in points)
    return f"checks installed: {named}; verify runs them with --plugin NAME or --all-plugins"
