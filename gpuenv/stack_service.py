"""Where a command's Stack comes from: a stack file written by `gpuenv resolve --json`, or the resolver.

The application service behind `gpuenv resolve`, and the first step of build-image and provision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path

from gpuenv import schema, validate
from gpuenv.adapters import nvml
from gpuenv.errors import BadRequest, CannotRun
from gpuenv.kb import OsInfo, load_kb, staleness_warning
from gpuenv.platforms.arch import machine
from gpuenv.platforms.registry import checked, for_stack, stack_from_dict
from gpuenv.resolve.request import Purpose, Request
from gpuenv.resolve.service import resolve
from gpuenv.stack import Stack

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
        if constraints.given() or constraints.cpu_arch:
            raise BadRequest(
                "--stack cannot be combined with the stack options (--torch, --cuda, --gpu, --os, --cpu-arch, …)",
                hint="edit the stack file, or resolve again with the constraints",
            )
        return load_stack(request.stack_file)
    constraints = replace(constraints, purpose=request.purpose)
    if constraints.driver == "auto":  # this machine's driver, and its CPU unless another is asked
        constraints = replace(constraints, driver=local_driver_version(), cpu_arch=constraints.cpu_arch or machine())
    kb = load_kb(kb_path)
    warning = staleness_warning(kb, date.today())
    if warning and on_warning is not None:
        on_warning(warning)
    return resolve(kb, constraints)


def load_stack(path: Path) -> Stack:
    """Read a stack written by `gpuenv resolve --json` (schema /2, or /1 as older gpuenv wrote it); its values
    are re-validated before use, its platform's fields by its platform."""
    hint = "give a file written by gpuenv resolve --json"
    data = schema.load(path, "stack file", "stack", hint=hint)
    try:
        stack = stack_from_dict(data)
    except (KeyError, TypeError) as exc:
        raise BadRequest(f"stack file {path} is malformed: {exc}", hint=hint) from None
    return checked(stack)


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
            hint="install the driver, or give the target's driver with --driver VERSION; without a GPU: --platform cpu",
        )
    return validate.driver(driver)


def describe(stack: Stack, *, quiet: bool) -> list[str]:
    """The stack as text: one line per pinned value with the reason for it (left out when quiet)."""
    rows = [
        ("torch", stack.torch, "torch"),
        ("torchvision", stack.torchvision or "-", None),
        ("torchaudio", stack.torchaudio or "- (no release)", None),
        *for_stack(stack).resolver.rows(stack),
        *((f"image {variant}", ref, None) for variant, ref in stack.base_images.items()),
    ]
    width = max(len(str(value)) for _, value, _ in rows)
    lines = [f"gpuenv stack: torch {stack.torch} + {stack.build} on {stack.os} {stack.cpu_arch}"]
    for label, value, reason in rows:
        why = "" if quiet or reason is None else f"  {stack.reasons.get(reason, '')}"
        lines.append(f"  {label:<20} {value:<{width}}{why}".rstrip())
    if not quiet:
        lines += [f"  {key}: {stack.reasons[key]}" for key in ("driver", "gpu", "fleet") if key in stack.reasons]
        lines += [f"  rejected {rejected.choice}: {rejected.why}" for rejected in stack.rejected]
    return lines
