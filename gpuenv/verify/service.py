"""The verify application service: one frozen request in, one outcome out.

The command line parses its options into a `VerifyRequest` and calls `verify`; everything between
(bad input files, the test-fault switch, the run on this node or inside an image, the output
files) happens here, so the CLI only presents the outcome.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from gpuenv import output
from gpuenv.adapters.docker import run_verify_in_image
from gpuenv.errors import EXIT_BAD_RESULT, EXIT_CANNOT_RUN, BadRequest, BadResult, CannotRun, GpuenvError
from gpuenv.files import output_kind, write_output
from gpuenv.output.jsontext import json_text
from gpuenv.verify import faults, registry
from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.cost import PriceRow, report_cost, resolve_price
from gpuenv.verify.engine import run_verify
from gpuenv.verify.launch import Explicit, LauncherChoice, Placement, detect
from gpuenv.verify.model import CheckResult, DeviceChoice, Level, Report, readable
from gpuenv.verify.passive import run_passive
from gpuenv.verify.pci import nvidia_on_pci
from gpuenv.verify.runner import OnStart, VerifyOptions

IMAGE_BUDGET = 10  # inside an image: this many times the per-check limit for the whole run


@dataclass(frozen=True)
class VerifyRequest:
    level: Level = "quick"
    checks: tuple[str, ...] = ()
    device: DeviceChoice = "auto"
    expect_gpus: int | None = None
    strict: bool = False
    report: Path | None = None
    junit: Path | None = None
    prometheus: Path | None = None
    artifacts: Path | None = None
    baseline: Path | None = None
    policy: Path | None = None
    kb: Path | None = None
    timeout: float | None = None
    image: str | None = None
    launcher: LauncherChoice = "auto"
    explicit: Explicit = field(default_factory=Explicit)  # --nnodes/--node-rank/--master-addr/--master-port/--node-name
    job_summary: Path | None = None
    price_per_hour: float | None = None  # what the measured devices cost per hour, as the user gave it
    instance_type: str | None = None  # this node's kind, for [prices] and fleet tables
    prices: tuple[PriceRow, ...] = ()  # the config file's [prices] table
    passive: bool = False  # --check nvml --passive: NVML read in this process, no load, no torch
    gpus: tuple[int, ...] = ()  # --gpus: only these GPUs (NVML indices); () for every GPU


@dataclass(frozen=True)
class VerifyOutcome:
    exit_code: int
    report: Report | None = None  # a run on this node
    image_report: dict[str, Any] | None = None  # the report a run inside an image gave
    unwritten: tuple[str, ...] = ()  # output files that could not be written, each named
    leads_node: bool = True  # False: another process of this node's ranks presents and writes its report
    notes: tuple[str, ...] = ()  # what the user should know beside the verdict (a price not found)


@dataclass(frozen=True)
class Preview:
    """What is known of a run before any worker starts (no NVML, no torch): for a header."""

    host: str
    level: Level
    checks: tuple[str, ...]  # in the order they will run
    gpus: str  # which GPUs, in words
    leads_node: bool  # False: another process of this node's ranks presents the run


def preview(request: VerifyRequest) -> Preview:
    """The run's header facts: this host, the level, the checks and the GPUs the PCI bus shows."""
    placement = placement_of(request)
    names = tuple(spec.name for spec in registry.select(request.level, request.checks))
    return Preview(
        host=socket.gethostname(),
        level=request.level,
        checks=names,
        gpus=_gpus_in_words(request),
        leads_node=placement is None or placement.leads_node,
    )


def _gpus_in_words(request: VerifyRequest) -> str:
    if request.device == "cpu":
        return "CPU only (--device cpu)"
    if request.gpus:
        return f"GPUs {','.join(map(str, request.gpus))} (--gpus)"
    on_bus = len(nvidia_on_pci())
    return f"{on_bus} NVIDIA GPU(s) on the PCI bus" if on_bus else "no NVIDIA GPU on the PCI bus"


def verify(
    request: VerifyRequest,
    *,
    on_result: Callable[[CheckResult], None] | None = None,
    on_start: OnStart | None = None,
) -> VerifyOutcome:
    """Certify this node (or request.image); writes the requested output files.

    on_start hears each check as it starts, on_result as it ends (on this node, by the process that
    presents the node's report)."""
    faults.check_setting()
    _passive_alone(request)
    placement = placement_of(request)
    if request.image is not None:
        if placement is not None:
            raise BadRequest("--image runs on this node alone, not across nodes", hint="drop --image or the launcher")
        return _in_image(request)
    return _on_this_node(request, Callbacks(on_result, on_start), placement)


def _passive_alone(request: VerifyRequest) -> None:
    if request.gpus and (request.image is not None or request.passive):
        raise BadRequest(
            "--gpus selects the GPUs of a run on this node, not of --image or --passive",
            hint="drop --gpus (--passive reads the GPUs CUDA_VISIBLE_DEVICES names)",
        )
    if request.passive and (request.checks != ("nvml",) or request.image is not None):
        raise BadRequest(
            "--passive reads NVML on this node only", hint="use it as: gpuenv verify --check nvml --passive"
        )


def placement_of(request: VerifyRequest, env: dict[str, str] | None = None) -> Placement | None:
    """Where this process stands in a run across nodes, or None. Launchers are recognised only for
    `--check allreduce` alone (an srun of one task per node runs the node checks, as before)."""
    only_collective = request.checks == ("allreduce",)
    asked = request.explicit.given() or request.launcher in ("srun", "torchrun")
    if asked and not only_collective:
        raise BadRequest(
            "a run across nodes runs only the collective check",
            hint="add --check allreduce (run the node checks with one task per node)",
        )
    if not only_collective:
        return None
    return detect(os.environ if env is None else env, request.explicit, choice=request.launcher)


@dataclass(frozen=True)
class Callbacks:
    on_result: Callable[[CheckResult], None] | None = None
    on_start: OnStart | None = None


def _on_this_node(request: VerifyRequest, callbacks: Callbacks, placement: Placement | None) -> VerifyOutcome:
    load_baselines(request.baseline)  # bad files are a bad request, before anything runs
    load_policy(request.policy)
    artifacts = request.artifacts
    if artifacts is None and request.report is not None and output_kind(request.report) == "atomic":
        artifacts = request.report.parent / f"{request.report.stem}.artifacts"
    opts = VerifyOptions(
        level=request.level,
        checks=request.checks,
        device=request.device,
        expect_gpus=request.expect_gpus,
        strict=request.strict,
        artifacts_dir=_text(artifacts),
        baseline=_text(request.baseline),
        policy=_text(request.policy),
        kb=_text(request.kb),
        timeout=request.timeout,
        placement=placement.to_dict() if placement else None,
        gpus=request.gpus,
    )
    leads_node = placement is None or placement.leads_node
    heard = callbacks if leads_node else Callbacks()
    run = run_passive if request.passive else partial(run_verify, on_result=heard.on_result, on_start=heard.on_start)
    report = run(opts)
    notes = _add_cost(request, report)
    files = [
        ("--report", request.report if leads_node else None, "json"),
        ("--junit", request.junit if leads_node else None, "junit"),
        ("--prometheus", request.prometheus if leads_node else None, "prometheus"),
        ("--job-summary", request.job_summary if placement and placement.leads_job else None, "job-summary"),
    ]
    unwritten = []
    for option, path, fmt in files:
        try:
            if path is not None:
                output.write("verify", fmt, report, path)
        except (OSError, GpuenvError) as exc:  # the verdict still counts: name the file, exit 1 or 3
            reason = exc.message if isinstance(exc, GpuenvError) else f"{type(exc).__name__}: {exc.strerror or exc}"
            unwritten.append(f"{option} {path} was not written: {reason}")
    code = report.verdict.exit_code
    if unwritten:  # not certified stays 1 (a health check must still drain); certified becomes 3
        code = EXIT_CANNOT_RUN if code == 0 else max(code, EXIT_BAD_RESULT)
    return VerifyOutcome(code, report=report, unwritten=tuple(unwritten), leads_node=leads_node, notes=notes)


def _add_cost(request: VerifyRequest, report: Report) -> tuple[str, ...]:
    """The report's cost figures at the user's price (none without one); the node's instance type."""
    if request.instance_type is not None:
        report.host["instance_type"] = request.instance_type
    data = report.to_dict()
    cost, notes = _cost_of(request, data)
    report.cost = cost
    return notes


def _cost_of(request: VerifyRequest, data: dict[str, Any]) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    gpus = (data.get("host") or {}).get("gpus") or []
    price, note = resolve_price(
        per_hour=request.price_per_hour,
        instance_type=request.instance_type,
        table=request.prices,
        gpu_names=[g.get("name") for g in gpus],
    )
    return report_cost(data, price, instance_type=request.instance_type), (note,) if note else ()


def _text(path: Path | None) -> str | None:
    return str(path) if path is not None else None


def image_args(request: VerifyRequest) -> list[str]:
    """The options passed on to the verify inside the image (files stay on the host)."""
    args: list[str] = []
    for name in request.checks:
        args += ["--check", name]
    if request.expect_gpus:
        args += ["--expect-gpus", str(request.expect_gpus)]
    if request.strict:
        args.append("--strict")
    if request.timeout:
        args += ["--timeout", str(request.timeout)]
    return args


def _in_image(request: VerifyRequest) -> VerifyOutcome:

    tag = str(request.image)
    budget = (request.timeout or 600.0) * IMAGE_BUDGET
    code, data = run_verify_in_image(
        tag, level=request.level, device=request.device, timeout=budget, extra_args=image_args(request)
    )
    if data is not None and not readable(data):
        raise BadResult(
            f"verify inside {tag} wrote a report of schema {data.get('schema')!r}, which this gpuenv cannot read",
            hint="use the same gpuenv version on the host and in the image",
        )
    if data is None:
        if code in (0, 1):
            raise BadResult(
                f"verify inside {tag} gave no report (exit {code})",
                hint=f"run it by hand: docker run --rm {tag} gpuenv verify",
            )
        raise CannotRun(
            f"verify could not run inside {tag} (exit {code})",
            hint="is gpuenv[verify] installed in the image? (gpuenv build-image installs it)",
        )
    if request.instance_type is not None:
        data.setdefault("host", {})["instance_type"] = request.instance_type
    cost, notes = _cost_of(request, data)
    if cost is not None:  # the image's figures, at the host's price
        data["cost"] = cost
    if request.report is not None:
        write_output(request.report, json_text(data))
    return VerifyOutcome(code, image_report=data, notes=notes)
