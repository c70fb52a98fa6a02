"""`gpuenv resolve` and `gpuenv matrix`."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from typing import Any

import click

from gpuenv import validate
from gpuenv.cli import settings
from gpuenv.cli.fleet_params import fleet_options, fleet_source
from gpuenv.cli.output import console, emit_json, table, warn
from gpuenv.cli.params import checked
from gpuenv.cli.stack_params import cpu_arch_name, stack_options, stack_request
from gpuenv.errors import BadRequest
from gpuenv.fleet.source import resolve_for_fleet
from gpuenv.kb import KnowledgeBase, kb_age_line, load_kb
from gpuenv.matrix import (
    AMD_GPU_COLUMNS,
    CUDA_COLUMNS,
    DRIVER_COLUMNS,
    ROCM_COLUMNS,
    TORCH_COLUMNS,
    MatrixRequest,
    amd_gpu_rows,
    driver_rows,
    rocm_rows,
)
from gpuenv.matrix import matrix as query
from gpuenv.platforms import spelling
from gpuenv.resolve.request import Purpose
from gpuenv.stack_service import describe, stack_for


@click.command()
@stack_options
@fleet_options
@click.option("--json", "as_json", is_flag=True, help="Print the stack as one JSON object (schema gpuenv.stack/2).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "requirements"]),
    default="text",
    help="text (default), json, or pip requirement lines with the wheel index.",
)
@click.option(
    "--for",
    "purpose",
    type=click.Choice(["image", "host"]),
    default="image",
    show_default=True,
    help="image: build-image's stack, on an nvidia/cuda base image; host: provision's, wheels only (no image needed).",
)
@click.pass_context
def resolve(ctx: click.Context, /, as_json: bool, fmt: str, purpose: Purpose, **options: Any) -> int:
    """Work out a fully pinned, matched stack, and explain each choice.

    \b
    Examples:
      gpuenv resolve --cuda 11.7
      gpuenv resolve --driver 535.104.05 --gpu H100 --json > stack.json
      gpuenv resolve --torch 2.4 --format requirements > requirements.txt
      gpuenv resolve --torch 2.4 --os ubuntu24.04 --for host
      gpuenv resolve --platform cpu
      gpuenv resolve --fleet reports/ --json > stack.json   # the newest stack every host runs
    Exit codes: 0 the stack, 2 bad or impossible request (the nearest valid choices are named),
    3 --driver auto cannot read this machine's driver (no NVIDIA driver or NVML here), gpuenv crashed.
    """
    if as_json and fmt not in ("text", "json"):
        raise BadRequest(f"--json and --format {fmt} exclude each other", hint="use one of them")
    fleet, request, quiet = fleet_source(options), replace(stack_request(options), purpose=purpose), settings(ctx).quiet
    if fleet is not None and (request.stack_file or request.constraints.driver):
        raise BadRequest("--fleet resolves from each host's driver: it takes no --stack or --driver", hint="drop them")
    if fleet is None:
        stack = stack_for(request, kb_path=settings(ctx).data, on_warning=warn)
    else:
        stack = resolve_for_fleet(settings(ctx).data, replace(request.constraints, purpose=purpose), fleet)
    if as_json or fmt == "json":
        emit_json(stack.to_dict())
    elif fmt == "requirements":
        click.echo("\n".join(stack.requirements()))
    else:
        click.echo("\n".join(describe(stack, quiet=quiet)))
        for warning in stack.warnings:
            warn(warning)
        if request.stack_file is None and not quiet:
            click.echo(f"  {kb_age_line(load_kb(settings(ctx).data), date.today())}")
    return 0


@click.command()
@click.option("--torch", callback=checked(spelling.torch_version), help="Only this torch.")
@click.option(
    "--cuda", callback=checked(lambda v: spelling.option_value("cuda", v)), help="Only this CUDA (12.4, 12, cu124)."
)
@click.option("--gpu", callback=checked(validate.gpu), help="Only the builds that run on this GPU (H100, sm_90).")
@click.option("--cpu-arch", "cpu_arch", callback=checked(cpu_arch_name), help="Only what x86_64 or aarch64 gets.")
@click.option("--drivers", is_flag=True, help="Each driver branch: its max CUDA and the torch builds it runs.")
@click.option("--rocm", is_flag=True, help="The ROCm releases (OS support, images, torch builds) and AMD's GPUs.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.pass_context
def matrix(ctx: click.Context, /, drivers: bool, rocm: bool, as_json: bool, **only: str | None) -> int:
    """Show the compatibility knowledge base as tables.

    \b
    Examples:
      gpuenv matrix
      gpuenv matrix --torch 2.4
      gpuenv matrix --cuda 12.4 --json
      gpuenv matrix --gpu H100
      gpuenv matrix --cpu-arch aarch64
      gpuenv matrix --drivers
      gpuenv matrix --rocm
    Exit codes: 0 the tables, 2 bad request (a version or GPU the knowledge base does not know), 3
    gpuenv crashed.
    """
    kb = load_kb(settings(ctx).data)
    if drivers:
        return show_drivers(kb, as_json=as_json)
    if rocm:
        return show_rocm(kb, as_json=as_json)
    found = query(kb, MatrixRequest(**only), today=date.today(), on_warning=warn)
    if as_json:
        emit_json(found.to_dict())
        return 0
    out = console()
    out.print(table(TORCH_COLUMNS, found.torch_rows(), title=f"PyTorch releases ({found.cpu_arch} wheels)"))
    out.print(table(CUDA_COLUMNS, found.cuda_rows(), title=f"CUDA ({found.cpu_arch} images)"))
    click.echo(found.age_line)
    return 0


def show_drivers(kb: KnowledgeBase, *, as_json: bool) -> int:
    """`matrix --drivers`: one row per driver branch."""
    rows = driver_rows(kb)
    if as_json:
        emit_json({"drivers": [dict(zip(DRIVER_COLUMNS, row, strict=True)) for row in rows]})
    else:
        console().print(table(DRIVER_COLUMNS, rows, title="NVIDIA driver branches"))
    return 0


def show_rocm(kb: KnowledgeBase, *, as_json: bool) -> int:
    """`matrix --rocm`: one row per ROCm release, then one per AMD GPU."""
    releases, gpus = rocm_rows(kb), amd_gpu_rows(kb)
    if as_json:
        emit_json(
            {
                "rocm": [dict(zip(ROCM_COLUMNS, row, strict=True)) for row in releases],
                "amd_gpus": [dict(zip(AMD_GPU_COLUMNS, row, strict=True)) for row in gpus],
            }
        )
    else:
        out = console()
        out.print(table(ROCM_COLUMNS, releases, title="ROCm releases with PyTorch wheels"))
        out.print(table(AMD_GPU_COLUMNS, gpus, title="AMD Instinct GPUs"))
    return 0
