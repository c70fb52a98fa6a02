"""The stack options (--torch --cuda --rocm --platform --torch-backend --driver --python --gpu --os --stack) of
the commands that resolve a stack: resolve, matrix, build-image, provision. Apart from cli.params so that the
commands that never resolve do not load the resolver's code. Every spelling of a backend is read by
gpuenv.platforms.spelling."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import click
from click.shell_completion import CompletionItem

from gpuenv import validate
from gpuenv.cli.params import F, checked, version_of
from gpuenv.errors import BadRequest
from gpuenv.kb import load_kb
from gpuenv.platforms import spelling
from gpuenv.platforms.arch import cpu_arch_named
from gpuenv.resolve.request import Request
from gpuenv.stack_service import StackRequest
from gpuenv.types import PLATFORMS

# The parameters stack_options adds: the fields of resolve.Request, uv's name for the backend, and the stack file.
STACK_KEYS = (
    "torch", "cuda", "driver", "python", "gpu", "os", "rocm", "platform", "cpu_arch", "torch_backend", "stack_file"
)  # fmt: skip
BACKEND_KEYS = ("cuda", "rocm", "platform")  # what --torch-backend stands for
TORCH_HELP = (
    "PyTorch version, e.g. 2.4, 2.4.0, 2.4.0+cu121, 2.6.0+rocm6.2.4 or 2.5.1+cpu (a local version picks the build)."
)
CUDA_HELP = "CUDA release of torch's NVIDIA wheels: 12.4, 12.4.1, 12 (any 12.x) or cu124."
ROCM_HELP = "ROCm release of torch's AMD wheels: 6.4, 6.2.4 or rocm6.4 (excludes --cuda; an AMD --gpu implies it)."
PLATFORM_HELP = "Which wheels: cuda (NVIDIA, the default), rocm (AMD) or cpu (no GPU)."
BACKEND_HELP = (
    "uv's name for the backend instead of --cuda/--rocm/--platform: cpu, cu126, rocm6.4; auto: --driver auto."
)
OS_HELP = "ubuntu20.04, ubuntu22.04 (default), ubuntu24.04, debian12, rockylinux8, rockylinux9."
CPU_ARCH_HELP = "The target's CPU: x86_64 (amd64, the default) or aarch64 (arm64); GH200/GB200 imply aarch64."
DRIVER_HELP = "NVIDIA driver the stack must run on, e.g. 535.104.05; 'auto' reads this machine's."


def complete_gpu(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of --gpu: the knowledge base's GPU models (NVIDIA's, then AMD's), then compute capabilities,
    each one word a shell passes whole ("RTX5090", which --gpu reads as "RTX 5090")."""
    kb = load_kb(None)
    names = (
        [g.name for g in kb.gpus]
        + [g.name for g in kb.amd_gpus]
        + [f"sm_{a.sm.replace('.', '')}" for a in kb.architectures]
    )
    words = [name.replace(" ", "") for name in names]
    typed = incomplete.replace(" ", "").lower()
    return [CompletionItem(word) for word in words if word.lower().startswith(typed)]


def complete_os(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of --os: the knowledge base's OS names."""
    return [CompletionItem(name) for name in load_kb(None).os_by_name if name.startswith(incomplete.lower())]


def complete_rocm(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of --rocm: the ROCm releases torch has wheels for."""
    return [CompletionItem(r.version) for r in load_kb(None).rocm if r.version.startswith(incomplete)]


def stack_options(func: F) -> F:
    """Add --torch --cuda --rocm --platform --torch-backend --driver --python --gpu --os --cpu-arch --stack."""
    options = [
        click.option("--torch", callback=checked(spelling.torch_version), help=TORCH_HELP),
        click.option("--cuda", callback=checked(lambda v: spelling.option_value("cuda", v)), help=CUDA_HELP),
        click.option(
            "--rocm",
            callback=checked(lambda v: spelling.option_value("rocm", v)),
            shell_complete=complete_rocm,
            help=ROCM_HELP,
        ),
        click.option("--platform", type=click.Choice(PLATFORMS), help=PLATFORM_HELP),
        click.option("--torch-backend", "torch_backend", callback=checked(_backend), help=BACKEND_HELP),
        click.option("--driver", callback=checked(validate.driver), help=DRIVER_HELP),
        click.option("--python", callback=version_of("Python version"), help="Python version, e.g. 3.11."),
        click.option(
            "--gpu",
            callback=checked(validate.gpu),
            shell_complete=complete_gpu,
            help="GPU model (H100, A100, L4…, or AMD's MI300X, MI355X…), sm_NN, or an AMD gfx target (gfx942).",
        ),
        click.option("--os", "os", callback=checked(validate.os_name), shell_complete=complete_os, help=OS_HELP),
        click.option("--cpu-arch", "cpu_arch", callback=checked(cpu_arch_name), help=CPU_ARCH_HELP),
        click.option(
            "--stack",
            "stack_file",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Use a stack written by `gpuenv resolve --json` instead of resolving.",
        ),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


def cpu_arch_name(value: str) -> str:
    return cpu_arch_named(value).name  # canonical: aarch64, not arm64


def _backend(value: str) -> str:
    spelling.torch_backend(value)  # refused here, at the option, when no platform reads it
    return value


def stack_request(params: dict[str, Any]) -> StackRequest:
    """Take the stack options out of a command's parameters, as one request (--torch-backend as what it stands for)."""
    values = {key: params.pop(key) for key in STACK_KEYS}
    stack_file: Path | None = values.pop("stack_file")
    backend: str | None = values.pop("torch_backend")
    if backend is not None:
        asked = spelling.torch_backend(backend)
        given = [f"--{key.replace('_', '-')}" for key in (*BACKEND_KEYS, *asked) if values.get(key) is not None]
        if given:
            raise BadRequest(f"--torch-backend {backend} and {given[0]} both name the backend", hint="give one of them")
        values.update(asked)
    return StackRequest(Request(**values), stack_file)
