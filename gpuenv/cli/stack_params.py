"""The stack options (--torch --cuda --rocm --driver --python --gpu --os --stack) of the commands that resolve a
stack: resolve, matrix, build-image, provision. Apart from cli.params so that the commands that never
resolve do not load the resolver's code."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import click
from click.shell_completion import CompletionItem

from gpuenv import validate
from gpuenv.cli.params import F, checked, version_of
from gpuenv.compat import load_kb
from gpuenv.resolve import Request
from gpuenv.stacks import StackRequest

# The parameters stack_options adds: the fields of resolve.Request, and the stack file.
STACK_KEYS = ("torch", "cuda", "driver", "python", "gpu", "os", "rocm", "stack_file")


def complete_gpu(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of --gpu: the knowledge base's GPU models (NVIDIA's, then AMD's), then compute capabilities."""
    kb = load_kb(None)
    names = (
        [g.name for g in kb.gpus]
        + [g.name for g in kb.amd_gpus]
        + [f"sm_{a.sm.replace('.', '')}" for a in kb.architectures]
    )
    return [CompletionItem(name) for name in names if name.lower().startswith(incomplete.lower())]


def complete_os(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of --os: the knowledge base's OS names."""
    return [CompletionItem(name) for name in load_kb(None).os_by_name if name.startswith(incomplete.lower())]


def complete_rocm(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of --rocm: the ROCm releases torch has wheels for."""
    return [CompletionItem(r.version) for r in load_kb(None).rocm if r.version.startswith(incomplete)]


def stack_options(func: F) -> F:
    """Add --torch --cuda --rocm --driver --python --gpu --os --stack to a command."""
    torch_help = "PyTorch version, e.g. 2.4, 2.4.0, 2.4.0+cu121 or 2.6.0+rocm6.2.4 (a local version picks the build)."
    rocm_help = "ROCm release of torch's AMD wheels, e.g. 6.4 or 6.2.4 (excludes --cuda; an AMD --gpu implies it)."
    os_help = "ubuntu20.04, ubuntu22.04 (default), ubuntu24.04, debian12, rockylinux8, rockylinux9."
    driver_help = "NVIDIA driver the stack must run on, e.g. 535.104.05; 'auto' reads this machine's."
    options = [
        click.option("--torch", callback=checked(validate.torch_version), help=torch_help),
        click.option("--cuda", callback=version_of("CUDA version"), help="CUDA version, e.g. 11.7 or 12.4.1."),
        click.option("--rocm", callback=version_of("ROCm version"), shell_complete=complete_rocm, help=rocm_help),
        click.option("--driver", callback=checked(validate.driver), help=driver_help),
        click.option("--python", callback=version_of("Python version"), help="Python version, e.g. 3.11."),
        click.option(
            "--gpu",
            callback=checked(validate.gpu),
            shell_complete=complete_gpu,
            help="GPU model (H100, A100, L4…, or AMD's MI300X, MI355X…), sm_NN, or an AMD gfx target (gfx942).",
        ),
        click.option("--os", "os", callback=checked(validate.os_name), shell_complete=complete_os, help=os_help),
        click.option(
            "--stack",
            "stack_file",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Use a stack written by `gpuenv resolve --json` instead of resolving.",
        ),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


def stack_request(params: dict[str, Any]) -> StackRequest:
    """Take the stack options out of a command's parameters, as one request."""
    values = {key: params.pop(key) for key in STACK_KEYS}
    stack_file: Path | None = values.pop("stack_file")
    return StackRequest(Request(**values), stack_file)
