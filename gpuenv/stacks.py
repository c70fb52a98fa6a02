"""Where a command's Stack comes from: a stack file written by `gpuenv resolve --json`, or the resolver.

The application service behind `gpuenv resolve`, and the first step of build-image and provision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path

from gpuenv import validate
from gpuenv.adapters import nvml
from gpuenv.compat import OsInfo, load_kb, staleness_warning
from gpuenv.errors import BadRequest, CannotRun
from gpuenv.resolve import Purpose, Request, resolve
from gpuenv.stack import Stack, load_stack

Warn = Callable[[str], None]


@dataclass(frozen=True)
class StackRequest:
    """The constraints of a stack (driver "auto": this machine's), or a stack file; never both."""

    constraints: Request = field(default_factory=Request)
    stack_file: Path | None = None
    # resolve and build-image resolve for an image unless told otherwise (provision resolves per host)
    purpose: Purpose = "image"


def stack_for(request: StackRequest, *, kb_path: Path | None, on_warning: Warn | None = None) -> Stack:
    """The Stack the request asks for: read from the stack file, or resolved from the constraints.

    on_warning hears that the knowledge base is stale, before it is used.
    """
    constraints = request.constraints
    if request.stack_file is not None:
        if constraints.given():
            raise BadRequest(
                "--stack cannot be combined with --torch/--cuda/--rocm/--driver/--python/--gpu/--os",
                hint="edit the stack file, or resolve again with the constraints",
            )
        return load_stack(request.stack_file)
    constraints = replace(constraints, purpose=request.purpose)
    if constraints.driver == "auto":
        constraints = replace(constraints, driver=local_driver_version())
    kb = load_kb(kb_path)
    warning = staleness_warning(kb, date.today())
    if warning and on_warning is not None:
        on_warning(warning)
    return resolve(kb, constraints)


def os_facts(stack: Stack, *, kb_path: Path | None) -> OsInfo:
    """The knowledge base's row for the stack's OS: how to install on it (a stack file may name one it lacks)."""
    row = load_kb(kb_path).os_by_name.get(stack.os)
    if row is None:
        raise BadRequest(
            f"the stack's OS {stack.os} is not in the knowledge base",
            hint="resolve the stack again, or give the knowledge base that names it with --data",
        )
    return row


def local_driver_version() -> str:
    """This machine's NVIDIA driver version, read through NVML."""
    problem = nvml.init()
    driver = None if problem else nvml.driver_versions()["driver"]
    if driver is None:
        raise CannotRun(
            f"--driver auto: no NVIDIA driver found on this machine ({problem or 'NVML gave no version'})",
            hint="install the driver, or give the target's driver with --driver VERSION",
        )
    return validate.driver(driver)


def describe(stack: Stack, *, quiet: bool) -> list[str]:
    """The stack as text: one line per pinned value with the reason for it (left out when quiet)."""
    rows = [
        ("torch", stack.torch, "torch"),
        ("torchvision", stack.torchvision or "-", None),
        ("torchaudio", stack.torchaudio or "- (no release)", None),
        *(_rocm_rows(stack) if stack.platform == "rocm" else _cuda_rows(stack)),
        *((f"image {variant}", ref, None) for variant, ref in stack.base_images.items()),
    ]
    width = max(len(str(value)) for _, value, _ in rows)
    lines = [f"gpuenv stack: torch {stack.torch} + {stack.cuda_build} on {stack.os}"]
    for label, value, reason in rows:
        why = "" if quiet or reason is None else f"  {stack.reasons.get(reason, '')}"
        lines.append(f"  {label:<20} {value:<{width}}{why}".rstrip())
    if not quiet:
        lines += [f"  {key}: {stack.reasons[key]}" for key in ("driver", "gpu") if key in stack.reasons]
        lines += [f"  rejected {rejected.choice}: {rejected.why}" for rejected in stack.rejected]
    return lines


Row = tuple[str, str, str | None]


def _cuda_rows(stack: Stack) -> list[Row]:
    return [
        ("CUDA build", stack.cuda_build, "cuda_build"),
        ("CUDA toolkit", stack.cuda, "cuda"),
        ("cuDNN", stack.cudnn or "unknown", "cudnn"),
        ("Python", f"{stack.python} ({stack.python_source.via})", "python"),
        ("OS", stack.os, "os"),
        ("wheel index", stack.index_url, None),
        ("driver min", stack.driver_min, "driver_min"),
        ("driver floor", stack.driver_floor, "driver_floor"),
        ("driver branch", stack.driver_branch, "driver_branch"),
    ]


def _rocm_rows(stack: Stack) -> list[Row]:
    return [
        ("ROCm build", stack.cuda_build, "cuda_build"),
        ("ROCm", str(stack.rocm), "rocm"),
        ("Python", f"{stack.python} ({stack.python_source.via})", "python"),
        ("OS", stack.os, "os"),
        ("wheel index", stack.index_url, None),
        ("driver", stack.driver_branch, "driver_branch"),
        ("PYTORCH_ROCM_ARCH", stack.arch_list, "arch_list"),
    ]
