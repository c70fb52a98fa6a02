"""The public API for a site's own verify checks in Python, version 1 (`API`).

A package adds a check by exposing a `Check` as an entry point in the group `gpuenv.checks`, named
as the check (docs/verify.md, "Site checks"; docs/examples/site-check/ is a whole package):

    [project.entry-points."gpuenv.checks"]
    scratch = "mysite.checks:scratch"

gpuenv imports the module to read the declaration, and runs `run` in its watchdogged check process
at the levels the check declares, under its time limit. What `run` returns becomes an ordinary
result of the report: the check is `site.<name>`, its findings' codes `site.<name>.<code>`, its
metrics figures that `gpuenv fleet report` compares across nodes. An exception raised by `run` is
the check's `crash`; anything but a `Result` returned is `error`.

Version 1 is these five names and their fields; a later version keeps them working. Import
nothing heavy at the module's top (torch): gpuenv imports it to list the check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

API = 1
GROUP = "gpuenv.checks"  # the entry point group gpuenv finds site checks in

Level = Literal["quick", "standard", "deep"]
Severity = Literal["info", "warn", "fail"]
Need = Literal["gpu", "torch"]  # gpu: skipped (saying so) on a CPU-only run; torch: imports torch
Action = Literal[
    "none", "monitor", "fix-config", "reinstall-stack", "reinstall-driver", "reset-gpu", "reboot", "drain", "rma"
]  # fmt: skip


@dataclass(frozen=True)
class Context:
    """What a check is told about the run."""

    level: Level
    device: Literal["cuda", "cpu"]  # where verify runs its workloads: cpu on a node without GPUs
    gpus: tuple[int, ...]  # the GPUs this run checks, by NVML index (as nvidia-smi numbers them)
    gpu_uuids: tuple[str, ...]  # their UUIDs, in the same order ("" where NVML gave none)
    work_dir: Path  # a private, empty folder, removed after the check
    limit_s: float  # the time limit the check runs under (it is killed at it)


@dataclass(frozen=True)
class Finding:
    """Something the check saw: `code` is the rule's own name (lower case, digits, - and _), which
    the report shows as site.<check>.<code>; `gpu` is the NVML index of the GPU it is about."""

    code: str
    severity: Severity
    message: str
    remediation: str | None = None
    action: Action = "none"
    gpu: int | None = None


@dataclass(frozen=True)
class Metric:
    """A figure: one number for the node, or {NVML index: number} per GPU, with its unit and
    which way is better, so fleet report and fleet baseline learn can judge it."""

    value: float | Mapping[int, float]
    unit: str
    better: Literal["higher", "lower"]


@dataclass(frozen=True)
class Result:
    """The check's answer. Without a status it is the worst of the findings' severities (pass when
    none warns or fails); a status better than a finding's is raised to it."""

    status: Literal["pass", "warn", "fail", "skip", "error"] | None = None  # error: it could not judge
    summary: str = ""
    findings: tuple[Finding, ...] = ()
    metrics: Mapping[str, Metric] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    """A check's declaration: `name` (lower case, digits, - and _; the entry point's name), the
    levels it runs at, its time limit in seconds (one for every level, or per level), what it
    needs, one line on what it proves, and `run`."""

    name: str
    run: Callable[[Context], Result]
    timeout: float | Mapping[Level, float]
    levels: tuple[Level, ...] = ("quick", "standard", "deep")
    needs: tuple[Need, ...] = ()
    about: str = ""
    api: int = 1  # the API version the check is written for
