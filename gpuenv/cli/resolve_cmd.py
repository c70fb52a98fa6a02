"""`gpuenv resolve` and `gpuenv matrix`."""

from __future__ import annotations

from typing import Any

import click

from gpuenv.cli import settings
from gpuenv.cli.output import console, emit_json, table
from gpuenv.cli.params import stack_options, stack_request, version_of


@click.command()
@stack_options
@click.option("--json", "as_json", is_flag=True, help="Print the stack as one JSON object (schema gpuenv.stack/1).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "requirements"]),
    default="text",
    help="text (default), json, or pip requirement lines with the wheel index.",
)
@click.pass_context
def resolve(ctx: click.Context, /, as_json: bool, fmt: str, **options: Any) -> int:
    """Work out a fully pinned, matched stack, and explain each choice.

    \b
    Examples:
      gpuenv resolve --cuda 11.7
      gpuenv resolve --driver 535.104.05 --gpu H100 --json > stack.json
      gpuenv resolve --torch 2.4 --format requirements > requirements.txt
    """
    from gpuenv.stacks import describe, stack_for

    stack = stack_for(stack_request(options), kb_path=settings(ctx).data)
    if as_json or fmt == "json":
        emit_json(stack.to_dict())
    elif fmt == "requirements":
        click.echo("\n".join(stack.requirements()))
    else:
        click.echo("\n".join(describe(stack, quiet=settings(ctx).quiet)))
        for warning in stack.warnings:
            click.secho(f"warning: {warning}", fg="yellow", err=True)
    return 0


@click.command()
@click.option("--torch", callback=version_of("torch version"), help="Only this torch.")
@click.option("--cuda", callback=version_of("CUDA version"), help="Only this CUDA.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.pass_context
def matrix(ctx: click.Context, torch: str | None, cuda: str | None, as_json: bool) -> int:
    """Show the compatibility knowledge base as tables.

    \b
    Examples:
      gpuenv matrix
      gpuenv matrix --torch 2.4
      gpuenv matrix --cuda 12.4 --json
    """
    from gpuenv.compat import load_kb
    from gpuenv.matrix import CUDA_COLUMNS, TORCH_COLUMNS, MatrixRequest
    from gpuenv.matrix import matrix as query

    found = query(load_kb(settings(ctx).data), MatrixRequest(torch=torch, cuda=cuda))
    if as_json:
        emit_json(found.to_dict())
        return 0
    out = console()
    out.print(table(TORCH_COLUMNS, found.torch_rows(), title="PyTorch releases"))
    out.print(table(CUDA_COLUMNS, found.cuda_rows(), title="CUDA"))
    return 0
