"""`gpuenv resolve` and `gpuenv matrix`, plus the stack options other commands share."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from gpuenv import validate
from gpuenv.cli.output import console, emit_json
from gpuenv.cli.params import checked
from gpuenv.errors import BadRequest, CannotRun

F = TypeVar("F", bound=Callable[..., Any])


def stack_options(func: F) -> F:
    """Add --torch --cuda --driver --python --gpu --os --stack to a command."""
    options = [
        click.option(
            "--torch",
            callback=checked(validate.torch_version),
            help="PyTorch version, e.g. 2.4, 2.4.0 or 2.4.0+cu121 (the local version picks the CUDA build).",
        ),
        click.option(
            "--cuda",
            callback=checked(lambda v: validate.version(v, "CUDA version")),
            help="CUDA version, e.g. 11.7 or 12.4.1.",
        ),
        click.option(
            "--driver",
            callback=checked(validate.driver),
            help="NVIDIA driver the stack must run on, e.g. 535.104.05; 'auto' reads this machine's.",
        ),
        click.option(
            "--python",
            callback=checked(lambda v: validate.version(v, "Python version")),
            help="Python version, e.g. 3.11.",
        ),
        click.option("--gpu", callback=checked(validate.gpu), help="GPU model (H100, A100, L4…) or sm_NN."),
        click.option(
            "--os",
            "os_name",
            callback=checked(validate.os_name),
            help="ubuntu20.04, ubuntu22.04 (default), ubuntu24.04, debian12, rockylinux8, rockylinux9.",
        ),
        click.option(
            "--stack",
            "stack_file",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Use a stack written by `gpuenv resolve --json` instead of resolving.",
        ),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


def stack_from_options(
    ctx: click.Context,
    *,
    torch: str | None,
    cuda: str | None,
    driver: str | None,
    python: str | None,
    gpu: str | None,
    os_name: str | None,
    stack_file: Path | None,
) -> Any:
    """The Stack the options ask for: read from --stack, or resolved from the constraints."""
    from gpuenv.compat import load_kb
    from gpuenv.resolve import Request, resolve
    from gpuenv.stack import load_stack

    if stack_file is not None:
        if any(v is not None for v in (torch, cuda, driver, python, gpu, os_name)):
            raise BadRequest(
                "--stack cannot be combined with --torch/--cuda/--driver/--python/--gpu/--os",
                hint="edit the stack file, or resolve again with the constraints",
            )
        return load_stack(stack_file)
    if driver == "auto":
        driver = local_driver_version()
    kb = load_kb(ctx.find_root().obj.data)
    warn_if_stale(kb)
    return resolve(kb, Request(torch=torch, cuda=cuda, driver=driver, python=python, gpu=gpu, os=os_name))


def warn_if_stale(kb: Any) -> None:
    from datetime import date

    from gpuenv.compat import staleness_warning

    warning = staleness_warning(kb, date.today())
    if warning:
        click.secho(f"warning: {warning}", fg="yellow", err=True)


def local_driver_version() -> str:
    """This machine's NVIDIA driver version, read through NVML."""
    from gpuenv.adapters import nvml

    problem = nvml.init()
    driver = None if problem else nvml.driver_versions()["driver"]
    if driver is None:
        raise CannotRun(
            f"--driver auto: no NVIDIA driver found on this machine ({problem or 'NVML gave no version'})",
            hint="install the driver, or give the target's driver with --driver VERSION",
        )
    return validate.driver(driver)


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
    stack = stack_from_options(ctx, **options)
    if as_json or fmt == "json":
        emit_json(stack.to_dict())
    elif fmt == "requirements":
        click.echo("\n".join(stack.requirements()))
    else:
        _print_stack(stack, quiet=ctx.find_root().obj.quiet)
        if options.get("stack_file") is None and not ctx.find_root().obj.quiet:
            _print_kb_age(ctx)
    return 0


def _print_kb_age(ctx: click.Context) -> None:
    from datetime import date

    from gpuenv.compat import kb_age_line, load_kb

    click.echo(f"  {kb_age_line(load_kb(ctx.find_root().obj.data), date.today())}")


def _print_stack(stack: Any, *, quiet: bool) -> None:
    rows = [
        ("torch", stack.torch, "torch"),
        ("torchvision", stack.torchvision or "-", None),
        ("torchaudio", stack.torchaudio or "- (no release)", None),
        ("CUDA build", stack.cuda_build, "cuda_build"),
        ("CUDA toolkit", stack.cuda, "cuda"),
        ("cuDNN", stack.cudnn or "unknown", "cudnn"),
        ("Python", f"{stack.python} ({stack.python_source.via})", "python"),
        ("OS", stack.os, "os"),
        ("wheel index", stack.index_url, None),
        ("driver min", stack.driver_min, "driver_min"),
        ("driver floor", stack.driver_floor, "driver_floor"),
        ("driver branch", stack.driver_branch, "driver_branch"),
        *((f"image {variant}", ref, None) for variant, ref in stack.base_images.items()),
    ]
    width = max(len(str(value)) for _, value, _ in rows)
    click.echo(f"gpuenv stack: torch {stack.torch} + {stack.cuda_build} on {stack.os}")
    for label, value, reason in rows:
        why = "" if quiet or reason is None else f"  {stack.reasons.get(reason, '')}"
        click.echo(f"  {label:<20} {value:<{width}}{why}".rstrip())
    if not quiet:
        for key in ("driver", "gpu"):
            if key in stack.reasons:
                click.echo(f"  {key}: {stack.reasons[key]}")
        for rejected in stack.rejected:
            click.echo(f"  rejected {rejected.choice}: {rejected.why}")
    for warning in stack.warnings:
        click.secho(f"warning: {warning}", fg="yellow", err=True)


@click.command()
@click.option("--torch", callback=checked(validate.torch_version), help="Only this torch.")
@click.option("--cuda", callback=checked(lambda v: validate.version(v, "CUDA version")), help="Only this CUDA.")
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
    from datetime import date

    from gpuenv.compat import kb_age_days, kb_age_line, load_kb
    from gpuenv.resolve import _torch_matches

    kb = load_kb(ctx.find_root().obj.data)
    warn_if_stale(kb)
    cuda_row = kb.find_cuda(cuda) if cuda else None
    if cuda and cuda_row is None:
        raise BadRequest(f"unknown CUDA version {cuda}", hint=f"known: {', '.join(c.version for c in kb.cuda)}")
    torches = [
        t
        for t in kb.torch
        if (not torch or _torch_matches(t.version, torch)) and (cuda_row is None or cuda_row.build in t.builds)
    ]
    cudas = [
        c
        for c in kb.cuda
        if (cuda_row is None or c is cuda_row) and (not torch or any(c.build in t.builds for t in torches))
    ]
    if torch and not torches:
        raise BadRequest(f"no torch release matches {torch}", hint=f"known: {', '.join(t.version for t in kb.torch)}")
    if as_json:
        emit_json(
            {
                "generated": kb.generated,
                "age_days": kb_age_days(kb, date.today()),
                "torch": [_torch_row(t) for t in torches],
                "cuda": [_cuda_row(c) for c in cudas],
            }
        )
        return 0
    _print_matrix(torches, cudas)
    click.echo(kb_age_line(kb, date.today()))
    return 0


def _torch_row(t: Any) -> dict[str, Any]:
    return {
        "torch": t.version,
        "torchvision": t.torchvision,
        "torchaudio": t.torchaudio,
        "builds": list(t.builds),
        "default_build": t.default_build,
        "arch": {build: str(code) for build, code in t.arch.items()},
        "python": list(t.python),
        "python_experimental": list(t.python_experimental),
        "source": t.provenance.source,
        "checked": t.provenance.checked,
        "unconfirmed": list(t.provenance.unconfirmed),
    }


def _cuda_row(c: Any) -> dict[str, Any]:
    return {
        "cuda": c.version,
        "build": c.build,
        "toolkit": c.toolkit,
        "bundled_driver": c.bundled_driver,
        "minor_compat_floor": c.minor_compat_floor,
        "cudnn": c.cudnn,
        "cudnn_tag": c.cudnn_tag,
        "images": list(c.images),
        "eol": c.eol,
        "deleted_tags": list(c.deleted_tags),
        "source": c.provenance.source,
        "checked": c.provenance.checked,
        "unconfirmed": list(c.provenance.unconfirmed),
    }


def _print_matrix(torches: list[Any], cudas: list[Any]) -> None:
    from rich.table import Table

    out = console()
    tt = Table(title="PyTorch releases")
    for col in ("torch", "torchvision", "torchaudio", "CUDA builds", "PyPI default", "Python", "unconfirmed"):
        tt.add_column(col)
    for t in torches:
        tt.add_row(
            t.version,
            t.torchvision or "—",
            t.torchaudio or "—",
            " ".join(t.builds),
            t.default_build,
            f"{t.python[0]}–{t.python[-1]}",
            ", ".join(t.provenance.unconfirmed),
        )
    out.print(tt)
    ct = Table(title="CUDA")
    for col in ("CUDA", "toolkit", "bundled driver", "floor", "cuDNN", "images", "EOL", "unconfirmed"):
        ct.add_column(col)
    for c in cudas:
        ct.add_row(
            c.version,
            c.toolkit,
            c.bundled_driver,
            c.minor_compat_floor,
            c.cudnn or "?",
            " ".join(c.images),
            "deleted" if c.toolkit in c.deleted_tags else "yes" if c.eol else "",
            ", ".join(c.provenance.unconfirmed),
        )
    out.print(ct)
