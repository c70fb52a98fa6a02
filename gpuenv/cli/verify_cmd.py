"""`gpuenv verify`: certify this node, or an image, with a real PyTorch workload."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from gpuenv import interrupt, validate
from gpuenv.cli.params import checked
from gpuenv.errors import EXIT_BAD_RESULT, EXIT_CANNOT_RUN, BadRequest, BadResult, CannotRun
from gpuenv.files import Output, check_output, write_output
from gpuenv.verify.registry import CHECKS, LEVELS

EPILOG = """\b
Examples:
  gpuenv verify                              # quick level, GPUs if the node has any
  gpuenv verify --level standard --expect-gpus 8 --report /var/log/gpuenv/verify.json
  gpuenv -q verify --prometheus /var/lib/node_exporter/textfile/gpuenv.prom
  gpuenv verify --device cpu --check allreduce --json
  gpuenv verify --image gpuenv/pytorch:2.4.1-cu121-py3.11-ubuntu22.04-runtime

\b
Levels: quick (Slurm prolog, <= 30 s on 8 GPUs), standard (epilog, after provisioning, <= 3 min),
deep (acceptance, <= 15 min).
Exit codes: 0 certified (warn/skip allowed; --strict makes warn 1), 1 not certified (a check
failed, timed out or crashed), 2 bad request, 3 could not run (no torch on a CPU-only machine,
interrupted, gpuenv crashed).
"""


def _out_path(ctx: click.Context, param: click.Parameter, value: str | None) -> Output | None:
    """Every output is checked before the first check runs (see gpuenv.files for the rule)."""
    return None if value is None else check_output(value, f"--{param.name}")


def _in_file(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    return None if value is None else validate.existing_file(value, f"--{param.name}")


@click.command("verify", epilog=EPILOG)
@click.option(
    "--level", type=click.Choice(LEVELS), default="quick", show_default=True, help="How thorough (and long) the run is."
)
@click.option(
    "--check",
    "checks",
    multiple=True,
    type=click.Choice([c.name for c in CHECKS]),
    help="Run only this check (repeatable).",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cuda", "cpu"]),
    default="auto",
    show_default=True,
    help="auto: CUDA when an NVIDIA GPU is on the PCI bus or NVML loads, else CPU only.",
)
@click.option("--expect-gpus", type=click.IntRange(min=1), metavar="N", help="Fail when fewer GPUs are visible.")
@click.option("--strict", is_flag=True, help="Treat warnings as failures (exit 1).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option(
    "--report",
    metavar="FILE",
    callback=_out_path,
    help="Write the JSON report here (atomically, also when interrupted; - for stdout).",
)
@click.option(
    "--junit",
    metavar="FILE",
    callback=_out_path,
    help="Write JUnit XML here (one testcase per check; - for stdout).",
)
@click.option(
    "--prometheus",
    metavar="FILE",
    callback=_out_path,
    help="Write a node_exporter textfile here (atomically, world-readable; - for stdout).",
)
@click.option(
    "--artifacts",
    type=click.Path(path_type=Path, file_okay=False),
    metavar="DIR",
    help="Folder for artifacts (profiler trace); default: beside --report.",
)
@click.option(
    "--baseline", metavar="FILE", callback=_in_file, help="Expected busbw/TFLOP/s table (see docs/verify.md)."
)
@click.option(
    "--policy", metavar="FILE", callback=_in_file, help="NVML policy: severities, XID lists (see docs/verify.md)."
)
@click.option(
    "--timeout",
    type=float,
    callback=checked(validate.seconds),
    metavar="SECONDS",
    help="Seconds allowed to each check (default: per check and level).",
)
@click.option("--image", metavar="TAG", help="Run the same verify inside this Docker image instead of on the host.")
@click.pass_context
def verify(
    ctx: click.Context,
    level: str,
    checks: tuple[str, ...],
    device: str,
    expect_gpus: int | None,
    strict: bool,
    as_json: bool,
    report: Output | None,
    junit: Output | None,
    prometheus: Output | None,
    artifacts: Path | None,
    baseline: Path | None,
    policy: Path | None,
    timeout: float | None,
    image: str | None,
) -> int:
    """Certify this node (or, with --image, an image) for PyTorch work."""
    _check_fault_switch()
    _one_stdout(as_json=as_json, report=report, junit=junit, prometheus=prometheus)
    if image is not None:
        return _in_image(
            validate.image_ref(image, "--image"),
            level=level,
            device=device,
            timeout=timeout,
            as_json=as_json,
            report=report,
            args=_image_args(ctx),
        )
    from gpuenv.verify.baselines import load_baselines
    from gpuenv.verify.checks.nvml import load_policy
    from gpuenv.verify.engine import VerifyOptions, run_verify

    load_baselines(baseline)  # bad files are a bad request, before anything runs
    load_policy(policy)
    if artifacts is None and report is not None and report.kind == "atomic" and report.path is not None:
        artifacts = report.path.parent / f"{report.path.stem}.artifacts"
    settings = ctx.obj
    opts = VerifyOptions(
        level=level,
        checks=checks,
        device=device,
        expect_gpus=expect_gpus,
        strict=strict,
        artifacts_dir=str(artifacts) if artifacts else None,
        baseline=str(baseline) if baseline else None,
        policy=str(policy) if policy else None,
        kb=str(settings.data) if settings and settings.data else None,
        timeout=timeout,
    )
    quiet = bool(settings and settings.quiet)
    # The engine turns the first SIGINT/SIGTERM into a partial report; any signal after it is
    # only noted, so a second Ctrl-C cannot stop the report the run promised from being written.
    with interrupt.Deferred() as late:
        result = run_verify(opts, on_result=None if (as_json or quiet) else _progress)
        on_stdout = any(o is not None and o.is_stdout for o in (report, junit, prometheus))
        _present(result, as_json=as_json, quiet=quiet, to_stderr=on_stdout)
        failed = _write_outputs(result, report=report, junit=junit, prometheus=prometheus)
    code: int = result.verdict.exit_code
    if late.signal and not result.interrupted:
        click.echo(f"gpuenv: error: interrupted by {late.signal} after the checks (outputs written)", err=True)
        return EXIT_CANNOT_RUN
    if failed and code == 0:
        return EXIT_CANNOT_RUN  # certified, but the promised file is missing: gpuenv failed its job
    return code if not failed else max(code, EXIT_BAD_RESULT)


def _one_stdout(*, as_json: bool, **outputs: Output | None) -> None:
    to_stdout = [f"--{name}" for name, o in outputs.items() if o is not None and o.is_stdout]
    if len(to_stdout) > 1 or (to_stdout and as_json):
        both = ", ".join(to_stdout + (["--json"] if as_json else []))
        raise BadRequest(f"{both} would all write to standard output", hint="send one of them to a file")


def _check_fault_switch() -> None:
    from gpuenv.verify import faults

    value = __import__("os").environ.get(faults.ENV, "")
    try:
        faults.parse(value)
    except ValueError as exc:
        raise BadRequest(str(exc), hint=f"unset {faults.ENV}: it is for gpuenv's own tests") from exc


def _progress(result: Any) -> None:
    click.echo(f"  {result.name:<10} {result.status:<8} {result.duration_s:6.1f}s  {result.summary}", err=True)


def _write_outputs(result: Any, *, report: Output | None, junit: Output | None, prometheus: Output | None) -> list[str]:
    """Write every output; a failure is named on stderr (the verdict is already shown). Returns the failed."""
    from gpuenv.errors import GpuenvError
    from gpuenv.verify import outputs

    failed = []
    for option, target, render in (
        ("--report", report, outputs.to_json),
        ("--junit", junit, outputs.to_junit),
        ("--prometheus", prometheus, outputs.to_prometheus),
    ):
        if target is None:
            continue
        try:
            write_output(target, render(result), what=option)
        except (OSError, GpuenvError) as exc:
            reason = exc.message if isinstance(exc, GpuenvError) else f"{type(exc).__name__}: {exc.strerror or exc}"
            click.echo(f"gpuenv: error: {option} {target.given} was not written: {reason}", err=True)
            failed.append(option)
    return failed


def _present(result: Any, *, as_json: bool, quiet: bool, to_stderr: bool = False) -> None:
    from gpuenv.cli.output import console
    from gpuenv.verify import outputs

    if as_json:
        sys.stdout.write(outputs.to_json(result))
    elif quiet:
        if not result.verdict.certified:
            click.echo(result.verdict.summary, err=True)
    else:
        outputs.render_table(result, console(stderr=to_stderr))


def _image_args(ctx: click.Context) -> list[str]:
    """The options to pass on to the verify inside the image (files stay on the host)."""
    args: list[str] = []
    params = ctx.params
    for name in params.get("checks", ()):
        args += ["--check", name]
    if params.get("expect_gpus"):
        args += ["--expect-gpus", str(params["expect_gpus"])]
    if params.get("strict"):
        args.append("--strict")
    if params.get("timeout"):
        args += ["--timeout", str(params["timeout"])]
    return args


def _in_image(
    tag: str, *, level: str, device: str, timeout: float | None, as_json: bool, report: Output | None, args: list[str]
) -> int:
    from gpuenv.adapters.docker import run_verify_in_image

    budget = (timeout or 600.0) * 10
    code, data = run_verify_in_image(tag, level=level, device=device, timeout=budget, extra_args=args)
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
    import json

    text = json.dumps(data, indent=2) + "\n"
    if report is not None:
        write_output(report, text, what="--report")
    if as_json:
        sys.stdout.write(text)
    else:
        verdict = data.get("verdict", {})
        for check in data.get("checks", []):
            click.echo(f"  {check['name']:<10} {check['status']:<8} {check.get('summary', '')}")
        click.echo(f"{tag}: {verdict.get('summary', f'exit {code}')}")
    return code
