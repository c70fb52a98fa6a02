"""`gpuenv build-image`: render a CUDA-matched Dockerfile and build, push and certify the image."""

from __future__ import annotations

import shlex
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from gpuenv import validate
from gpuenv.cli.output import console, emit_json, printable
from gpuenv.cli.params import checked
from gpuenv.cli.resolve_cmd import stack_from_options, stack_options
from gpuenv.errors import BadRequest, BadResult
from gpuenv.render.dockerfile import FLAVORS, ImageOptions, RenderedImage, render_image
from gpuenv.stack import Stack

VERIFY_TIMEOUT = 1800.0
# The keyword names stack_from_options takes (the parameters of stack_options).
STACK_PARAMS = ("torch", "cuda", "driver", "python", "gpu", "os_name", "stack_file")


@dataclass(frozen=True)
class Plan:
    """Everything build-image was asked to do, validated."""

    stack: Stack
    options: ImageOptions
    tags: tuple[str, ...]
    wheelhouse: Path | None
    app: Path | None
    buildargs: dict[str, str]
    pin_base: bool


@click.command("build-image")
@stack_options
@click.option(
    "--spec", "spec", metavar="NAME|FILE", help="A curated image spec by name, or a TOML spec file (see images/)."
)
@click.option(
    "--flavor",
    type=click.Choice(FLAVORS),
    default="runtime",
    show_default=True,
    help="runtime: the CUDA runtime base; devel: the cuDNN devel base with nvcc, for extensions.",
)
@click.option("--cudnn", is_flag=True, help="Use the cuDNN variant of the runtime base image.")
@click.option(
    "--with",
    "with_",
    multiple=True,
    metavar="PKGS",
    default=("torchvision",),
    show_default=True,
    help="Companions pinned with torch: torchvision, torchaudio (comma-separated or repeated); 'none'.",
)
@click.option("--slim", is_flag=True, help="Leave out the C compiler and Python headers torch.compile needs.")
@click.option(
    "--tag",
    "tags",
    multiple=True,
    metavar="REF",
    callback=checked(lambda v: validate.image_ref(v, "--tag")),
    help="Name the image (repeatable); default gpuenv/pytorch:<torch>-<build>-py<python>-<os>-<flavor>.",
)
@click.option(
    "--render-only",
    "render_dir",
    metavar="DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the Dockerfile and build context into DIR and build nothing (no Docker needed).",
)
@click.option("--force", is_flag=True, help="With --render-only: replace gpuenv's files in a non-empty DIR.")
@click.option(
    "--base-image",
    metavar="REF",
    callback=checked(lambda v: validate.image_ref(v, "--base-image")),
    help="Use this base instead of the stack's (an internal mirror, a digest-pinned reference).",
)
@click.option("--pin-base", is_flag=True, help="Look up the base image's digest now and build FROM it by digest.")
@click.option(
    "--index-url",
    metavar="URL",
    callback=checked(lambda v: validate.url(v, "--index-url")),
    help="A mirror of the stack's PyTorch wheel index.",
)
@click.option(
    "--wheelhouse",
    metavar="DIR",
    callback=checked(lambda v: validate.existing_dir(v, "--wheelhouse")),
    help="Install every wheel from this directory with --no-index (air-gapped sites).",
)
@click.option(
    "--pip",
    "pip_packages",
    multiple=True,
    metavar="PKG",
    callback=checked(validate.pip_requirement),
    help="Extra package to install, e.g. transformers==4.44.2 (repeatable); torch stays pinned.",
)
@click.option(
    "--app",
    metavar="DIR",
    callback=checked(lambda v: validate.existing_dir(v, "--app")),
    help="Copy this project into /app, last (its requirements.txt is installed before it).",
)
@click.option(
    "--build-arg",
    "build_args",
    multiple=True,
    metavar="NAME=VALUE",
    callback=checked(validate.build_arg),
    help="NAME=VALUE passed to the build, e.g. HTTP_PROXY=http://proxy:3128 (repeatable).",
)
@click.option(
    "--network",
    type=click.Choice(["default", "host", "none"]),
    default="default",
    show_default=True,
    help="Network for the build's RUN steps.",
)
@click.option("--no-cache", is_flag=True, help="Rebuild every layer.")
@click.option("--push", is_flag=True, help="Push every tag after the build and report the digests.")
@click.option(
    "--verify",
    is_flag=True,
    help="Run `gpuenv verify --level quick` in the new image (with the host's GPUs if it has any).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.pass_context
def build_image(ctx: click.Context, /, **params: Any) -> int:
    """Render a Dockerfile matched to the stack and build the image through Docker.

    \b
    Examples:
      gpuenv build-image --cuda 11.7 --cudnn --os ubuntu20.04 --tag team/torch:cu117
      gpuenv build-image --spec cu128-ubuntu22.04 --push --tag registry:5000/torch:cu128
      gpuenv build-image --cuda 12.8 --flavor devel --gpu H100 --render-only ./ctx
      gpuenv build-image --stack stack.json --wheelhouse ./wheels --app . --verify

    Exit codes: 0 built, 1 a build step, push or verification failed, 2 bad request,
    3 Docker unreachable.
    """
    plan = _plan(ctx, params)
    settings = ctx.find_root().obj
    say = _Say(quiet=settings.quiet)
    rendered = render_image(plan.stack, plan.options)  # a bad request fails here, before Docker is asked
    client = None
    if params["render_dir"] is None or plan.pin_base:
        from gpuenv.adapters import docker as adapter

        client = adapter.connect()
        if plan.pin_base:
            pinned = adapter.pin_digest(client, rendered.base_image)
            plan = replace(plan, options=replace(plan.options, base_image=pinned))
            rendered = render_image(plan.stack, plan.options)
    say.rendered(rendered, plan)
    if params["render_dir"] is not None:
        return _render_only(plan, rendered, params["render_dir"], force=params["force"], as_json=params["as_json"])
    return _build(client, plan, rendered, params, say, verbose=settings.verbose)


def _plan(ctx: click.Context, params: dict[str, Any]) -> Plan:
    from gpuenv.render.images import with_packages

    given = {name for name in params if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE}
    if params["render_dir"] is not None and (params["push"] or params["verify"]):
        raise BadRequest(
            "--render-only builds nothing, so it cannot --push or --verify",
            hint="drop --render-only, or build the rendered directory later",
        )
    if params["force"] and params["render_dir"] is None:
        raise BadRequest("--force only applies to --render-only", hint="add --render-only DIR")
    stack, spec_values, spec_tag = _stack(ctx, params, given)
    values: dict[str, Any] = {**spec_values}
    for key, name in (("flavor", "flavor"), ("cudnn", "cudnn"), ("slim", "slim")):
        if name in given or key not in values:
            values[key] = params[name]
    if "with_" in given or "with_packages" not in values:
        values["with_packages"] = with_packages(params["with_"])
    values["pip"] = (*values.get("pip", ()), *params["pip_packages"])
    app: Path | None = params["app"]
    wheelhouse: Path | None = params["wheelhouse"]
    options = ImageOptions(
        **values,
        base_image=params["base_image"],
        index_url=params["index_url"],
        wheelhouse=wheelhouse is not None,
        app=app is not None,
        app_requirements=app is not None and (app / "requirements.txt").is_file(),
    )
    if params["push"] and not params["tags"] and not spec_tag:
        raise BadRequest(
            "--push needs a --tag naming the registry", hint="e.g. --tag registry.example.com:5000/torch:cu117"
        )
    tags = params["tags"] or ((spec_tag,) if spec_tag else (_default_tag(stack, options),))
    if wheelhouse is not None:
        from gpuenv.render.context import check_wheelhouse

        pins = {"torch": stack.torch, **{n: str(getattr(stack, n)) for n in options.with_packages}}
        names = tuple(_project_name(r) for r in (*options.gpuenv_requirements, *options.pip))
        check_wheelhouse(wheelhouse, pins, names)
    if params["render_dir"] is not None:
        from gpuenv.render.context import check_destination

        check_destination(params["render_dir"], force=params["force"], app=app)
    buildargs = dict(arg.split("=", 1) for arg in params["build_args"])
    return Plan(stack, options, tuple(tags), wheelhouse, app, buildargs, params["pin_base"])


def _stack(ctx: click.Context, params: dict[str, Any], given: set[str]) -> tuple[Stack, dict[str, Any], str | None]:
    stack_params = {name: params[name] for name in STACK_PARAMS}
    if params["spec"] is None:
        return stack_from_options(ctx, **stack_params), {}, None
    from gpuenv.render.images import find_spec, load_spec, spec_options

    if params["stack_file"] is not None:
        raise BadRequest("--spec and --stack both name a stack", hint="give one of them")
    spec = load_spec(find_spec(params["spec"]))
    names = {"os": "os_name"}
    for key, value in spec.stack.items():
        name = names.get(key, key)
        if name not in given:
            stack_params[name] = value
    return stack_from_options(ctx, **stack_params), spec_options(spec), spec.tag


def _project_name(requirement: str) -> str:
    from packaging.requirements import Requirement

    return Requirement(requirement).name


def _default_tag(stack: Stack, options: ImageOptions) -> str:
    flavor = options.flavor + ("-cudnn" if options.cudnn and options.flavor == "runtime" else "")
    flavor += "-slim" if options.slim else ""
    tag = f"gpuenv/pytorch:{stack.torch}-{stack.cuda_build}-py{stack.python}-{stack.os}-{flavor}"
    return validate.image_ref(tag, "default tag")


# --- render only ---------------------------------------------------------------------------------


def _render_only(plan: Plan, rendered: RenderedImage, dest: Path, *, force: bool, as_json: bool) -> int:
    from gpuenv.render.context import write_context

    written = write_context(rendered, dest, wheelhouse=plan.wheelhouse, app=plan.app, force=force)
    if as_json:
        emit_json(
            {
                "rendered": str(dest),
                "files": written,
                "base_image": rendered.base_image,
                "tags": list(plan.tags),
                "labels": rendered.labels,
                "notes": list(rendered.notes),
                "warnings": list(rendered.warnings),
                "stack": plan.stack.to_dict(),
            }
        )
        return 0
    click.echo(f"wrote {', '.join(written)} into {dest}")
    click.echo(f"build it with: docker build -t {shlex.quote(plan.tags[0])} {shlex.quote(str(dest))}")
    return 0


# --- build ---------------------------------------------------------------------------------------


def _build(client: Any, plan: Plan, rendered: RenderedImage, params: dict[str, Any], say: _Say, *, verbose: int) -> int:
    from gpuenv.adapters import docker as adapter
    from gpuenv.render.context import write_context

    network = None if params["network"] == "default" else params["network"]
    with tempfile.TemporaryDirectory(prefix="gpuenv-build-") as tmp:
        context = Path(tmp) / "context"
        write_context(rendered, context, wheelhouse=plan.wheelhouse, app=plan.app)
        wheel_sha256 = _wheel_digest(context)
        with say.progress(verbose=verbose) as on_event:
            result = adapter.build(
                client,
                context,
                tag=plan.tags[0],
                buildargs=plan.buildargs,
                nocache=params["no_cache"],
                network_mode=network,
                on_event=on_event,
            )
    for extra in plan.tags[1:]:
        adapter.tag(client, result.image_id, extra)
    info = adapter.inspect(client, result.image_id)
    say.line(f"built {result.image_id[:19]} as {', '.join(plan.tags)} ({info.get('Size', 0) / 1e6:.0f} MB)")
    pushed = {ref: adapter.push(client, ref) for ref in plan.tags} if params["push"] else {}
    for ref, digest in pushed.items():
        say.line(f"pushed {ref}: {digest}")
    verify = _verify(plan.tags[0], say) if params["verify"] else None
    if params["as_json"]:
        emit_json(
            {
                "image_id": result.image_id,
                "tags": list(plan.tags),
                "size": info.get("Size"),
                "base_image": rendered.base_image,
                "labels": (info.get("Config") or {}).get("Labels") or {},
                "steps": result.steps,
                "instructions": result.instructions,
                "cached_steps": result.cached_steps,
                "pushed": pushed,
                "verify": verify,
                "gpuenv_wheel_sha256": wheel_sha256,
                "notes": list(rendered.notes),
                "warnings": list(rendered.warnings),
                "stack": plan.stack.to_dict(),
            }
        )
    return 1 if verify is not None and verify["exit_code"] != 0 else 0


def _wheel_digest(context: Path) -> str:
    """sha256 of the gpuenv wheel in the context: when it is unchanged, Docker reuses its layer."""
    import hashlib

    from gpuenv.render.context import WHEEL_DIR

    wheel = next((context / WHEEL_DIR).glob("gpuenv-*.whl"))
    return hashlib.sha256(wheel.read_bytes()).hexdigest()


def _verify(image: str, say: _Say) -> dict[str, Any]:
    from gpuenv.adapters.docker import run_verify_in_image

    say.line(f"verifying {image}: gpuenv verify --level quick inside it")
    code, report = run_verify_in_image(
        image, level="quick", device="auto", timeout=VERIFY_TIMEOUT, extra_args=[], on_note=say.warn
    )
    if code not in (0, 1):
        raise BadResult(
            f"gpuenv verify inside {image} could not run (exit {code})",
            hint="run it by hand: docker run --rm --gpus all IMAGE gpuenv verify",
        )
    say.line(f"verify: {'passed' if code == 0 else 'FAILED'} (exit {code})")
    return {"exit_code": code, "report": report}


class _Say:
    """Progress and notes on stderr, so that stdout carries only the result (or the JSON)."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet

    def line(self, text: str) -> None:
        if not self.quiet:
            click.echo(printable(text), err=True)

    def warn(self, text: str) -> None:
        if not self.quiet:
            click.echo(f"warning: {printable(text)}", err=True)

    def rendered(self, rendered: RenderedImage, plan: Plan) -> None:
        self.line(f"base image: {rendered.base_image}")
        for note in rendered.notes:
            self.line(f"note: {note}")
        for warning in rendered.warnings:
            self.warn(warning)
        if plan.stack.base_image_eol and "@sha256:" not in rendered.base_image:
            self.warn(
                "pin the base by digest while it still exists: add --pin-base, or "
                "--base-image REF@sha256:<digest> from your mirror"
            )

    def progress(self, *, verbose: int) -> Any:
        return _Progress(self, live=sys.stderr.isatty() and not self.quiet, verbose=verbose)


class _Progress:
    """Shows each build step as it starts (a live status line on a terminal), output with -v."""

    def __init__(self, say: _Say, *, live: bool, verbose: int) -> None:
        self.say, self.live, self.verbose = say, live, verbose
        self.status: Any = None

    def __enter__(self) -> Callable[[Any], None]:
        if self.live:
            self.status = console(stderr=True).status("building…")
            self.status.__enter__()
        return self.on_event

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.__exit__(None, None, None)

    def on_event(self, event: Any) -> None:
        if event.kind == "step":
            text = f"step {event.step}/{event.total}: {event.text[:100]}"
            if self.status is not None:
                self.status.update(text)
            if not self.live or self.verbose:
                self.say.line(text)
        elif event.kind == "cached" and self.verbose:
            self.say.line("  (cached)")
        elif event.kind == "output" and self.verbose:
            self.say.line(f"  {event.text}")
