"""The verify application service: one frozen request in, one outcome out.

The command line parses its options into a `VerifyRequest` and calls `verify`; everything between
(bad input files, the test-fault switch, the run on this node or inside an image, the output
files) happens here, so the CLI only presents the outcome. The run itself (the engine, `--passive`,
the run inside an image, the cost figures) is loaded by name when a request asks for it (RUNS), so
`--passive` imports none of the engine's machinery.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuenv import __version__, output
from gpuenv.errors import EXIT_BAD_RESULT, EXIT_CANNOT_RUN, BadRequest, GpuenvError
from gpuenv.files import output_kind
from gpuenv.types import SITE_PREFIX
from gpuenv.verify import faults, registry
from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.launch import Explicit, LauncherChoice, Placement, detect, host_identity, hostname
from gpuenv.verify.model import HEALTH, CheckResult, DeviceChoice, Level, Report, Verdict
from gpuenv.verify.options import OnStart, SiteOptions, VerifyOptions
from gpuenv.verify.pci import nvidia_on_pci
from gpuenv.verify.prices import PriceRow, resolve_price

if TYPE_CHECKING:  # loaded by name (RUNS) only where a run enables site checks
    from gpuenv.verify.site.spec import SiteSpec

# The runs verify makes, each loaded only when a request asks for it (as gpuenv.cli loads a command and
# the worker a check): `--passive` imports neither the engine nor the Docker adapter nor the cost figures.
RUNS = {
    "node": "gpuenv.verify.engine:run_verify",  # the checks in the watchdogged worker
    "passive": "gpuenv.verify.passive:run_passive",  # NVML read in this process
    "image": "gpuenv.verify.image_run:run_in_image",  # the same verify inside a Docker image
    "cost": "gpuenv.verify.cost:report_cost",  # cost figures, only where a price is found
    "site": "gpuenv.verify.site.load:site_checks",  # the site checks a run enables, nothing scanned otherwise
}


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
    site: SiteOptions = field(default_factory=SiteOptions)  # --checks-dir, --plugin, --all-plugins


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
    names = tuple(spec.name for spec in registry.select(request.level, request.checks, site_checks(request)))
    return Preview(
        host=hostname(),
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
        in_image: Callable[[VerifyRequest], VerifyOutcome] = loaded("image")
        return in_image(request)
    return _on_this_node(request, Callbacks(on_result, on_start), placement)


def _passive_alone(request: VerifyRequest) -> None:
    if request.gpus and (request.image is not None or request.passive):
        raise BadRequest(
            "--gpus selects the GPUs of a run on this node, not of --image or --passive",
            hint="drop --gpus (--passive reads the GPUs CUDA_VISIBLE_DEVICES names)",
        )
    site = [name for name in request.checks if name.startswith(SITE_PREFIX)]
    if site and request.image is not None:
        raise BadRequest(f"--check {site[0]}: site checks run on this node, not in --image", hint="drop --image")
    if request.passive and (request.checks != (HEALTH,) or request.image is not None):
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


def checks_overview(request: VerifyRequest) -> list[dict[str, Any]]:
    """`--list-checks`: each level's checks, gpuenv's and the site checks the request enables."""
    return registry.levels_overview(site_checks(request))


def site_checks(request: VerifyRequest) -> tuple[SiteSpec, ...]:
    """The site checks this run may select (loaded only when enabled and the selection can take
    them: not for --passive, --image or another named check alone); a `--check site.NAME` none of
    them answers is a bad request."""
    wanted = [name for name in request.checks if name.startswith(SITE_PREFIX)]
    usable = not (request.passive or request.image is not None) and (wanted or not request.checks)
    found: tuple[SiteSpec, ...] = loaded("site")(request.site) if usable and request.site.given() else ()
    missing = [name for name in wanted if name not in {spec.name for spec in found}]
    if missing:
        enabled = ", ".join(spec.name for spec in found) or "none"
        raise BadRequest(
            f"--check {missing[0]}: no such site check is enabled here (enabled: {enabled})",
            hint="enable site checks with --checks-dir DIR, --plugin NAME or --all-plugins (gpuenv verify --help)",
        )
    return found


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
        site=site_checks(request),
    )
    leads_node = placement is None or placement.leads_node
    heard = callbacks if leads_node else Callbacks()
    run: Callable[[VerifyOptions], Report] = (
        loaded("passive")
        if request.passive
        else partial(loaded("node"), on_result=heard.on_result, on_start=heard.on_start)
    )
    placeholder = _hold_place(request.report if leads_node else None, opts)
    try:
        report = run(opts)
    except GpuenvError:  # a bad request found on the way: no run, so no report (as before it started)
        _drop(placeholder)
        raise
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


NEVER_FINISHED = "never finished"


def _hold_place(path: Path | None, opts: VerifyOptions) -> Path | None:
    """Write a failing report where --report points before the run starts, for the final report to
    replace: if this process is killed (SIGKILL: the OOM killer, a job's limit), the file says the run
    never finished, and no earlier report stands in for it. Only a regular file (atomic writes)."""
    if path is None or output_kind(path) != "atomic":
        return None
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    summary = (
        f"verify started at {started} and never finished: killed before it wrote its report "
        "(SIGKILL: the kernel's OOM killer, a job's time limit), or still running"
    )
    report = Report(
        level=opts.level,
        device="cpu" if opts.device == "cpu" else "cuda",
        cpu_only=opts.device == "cpu",
        started=started,
        finished=started,
        gpuenv_version=__version__,
        host={**host_identity(), "gpus": []},
        stack={},
        checks=[],
        verdict=Verdict(False, "interrupted", EXIT_CANNOT_RUN, summary),
        partial=True,
        interrupted=NEVER_FINISHED,
        options={"checks": list(opts.checks), "strict": opts.strict, "expect_gpus": opts.expect_gpus},
    )
    try:
        output.write("verify", "json", report, path)
    except (OSError, GpuenvError):  # the final write names the problem
        return None
    return path


def _drop(placeholder: Path | None) -> None:
    if placeholder is not None:
        with contextlib.suppress(OSError):
            placeholder.unlink()


def _add_cost(request: VerifyRequest, report: Report) -> tuple[str, ...]:
    """The report's cost figures at the user's price (none without one); the node's instance type."""
    if request.instance_type is not None:
        report.host["instance_type"] = request.instance_type
    report.cost, notes = cost_of(request, report.host, report.to_dict)
    return notes


def cost_of(
    request: VerifyRequest, host: Mapping[str, Any], report: Callable[[], Mapping[str, Any]]
) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """The `cost` object of a report (its `host`; `report()` gives the whole report) at the request's
    price, None without one, and a note when a price was looked for and not found."""
    gpus = host.get("gpus") or []
    price, note = resolve_price(
        per_hour=request.price_per_hour,
        instance_type=request.instance_type,
        table=request.prices,
        gpu_names=[g.get("name") for g in gpus],
    )
    notes = (note,) if note else ()
    if price is None:
        return None, notes
    report_cost: Callable[..., dict[str, Any] | None] = loaded("cost")
    return report_cost(report(), price, instance_type=request.instance_type), notes


def loaded(run: str) -> Any:
    """The function RUNS names, its module imported now."""
    module, name = RUNS[run].split(":")
    return getattr(import_module(module), name)


def _text(path: Path | None) -> str | None:
    return str(path) if path is not None else None
