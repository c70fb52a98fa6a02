"""`gpuenv build-image`: render a Dockerfile matched to a CUDA or ROCm stack and build, push and certify the image."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from gpuenv import validate
from gpuenv.cli import settings
from gpuenv.cli.fleet_params import rollout_gate, rollout_options
from gpuenv.cli.output import console, emit_json, printable, warn
from gpuenv.cli.params import checked, choice, grammar, on_disk
from gpuenv.cli.stack_params import stack_options, stack_request
from gpuenv.image.build import Prepared, build, prepare, write_rendered
from gpuenv.image.plan import DEFAULTS, BuildRequest, os_line, plan_image
from gpuenv.render.dockerfile import FLAVORS

SPEC_OVERRIDABLE = ("flavor", "cudnn", "with_", "slim")  # None unless set: a spec's value applies
DIR = click.Path(file_okay=False, path_type=Path)
HELP = {
    "flavor": "runtime: the CUDA runtime base (ROCm: AMD's rocm/dev image); devel: the cuDNN devel base with nvcc "
    "(ROCm: the -complete image with hipcc, PYTORCH_ROCM_ARCH), for extensions.",
    "with": "Companions pinned with torch: torchvision, torchaudio (comma-separated or repeated); 'none'.",
    "tag": "Name the image (repeatable); default: gpuenv/pytorch, tagged with the stack's torch, CUDA build, "
    "Python, OS and flavor (see docs/build-image.md).",
    "render_only": "Write the Dockerfile and build context into DIR and build nothing (no Docker needed).",
    "base_image": "Use this base instead of the stack's (an internal mirror, a digest-pinned reference).",
    "index_url": "A mirror of the stack's PyTorch wheel index.",
    "wheelhouse": "Install every wheel from this directory with --no-index (air-gapped sites).",
    "pip": "Extra package to install, e.g. transformers==4.44.2 (repeatable); torch stays pinned.",
    "app": "Copy this project into /app, last (its requirements.txt is installed before it).",
    "build_arg": "NAME=VALUE passed to the build, e.g. HTTP_PROXY=http://proxy:3128 (repeatable).",
    "verify": "Run `gpuenv verify --level quick` in the new image (with the host's GPUs if it has any).",
}


@click.command("build-image")
@stack_options
@click.option("--spec", metavar="NAME|FILE", help="A curated image spec by name, or a TOML spec file (see images/).")
@click.option("--flavor", **choice(FLAVORS, DEFAULTS["flavor"]), help=HELP["flavor"])
@click.option("--cudnn", is_flag=True, help="Use the cuDNN variant of the runtime base image (CUDA only).")
@click.option(
    "--with",
    "with_",
    multiple=True,
    metavar="PKGS",
    default=DEFAULTS["with_packages"],
    show_default=True,
    help=HELP["with"],
)
@click.option("--slim", is_flag=True, help="Leave out the C compiler and Python headers torch.compile needs.")
@click.option(
    "--tag", "tags", multiple=True, metavar="REF", callback=grammar(validate.image_ref, "--tag"), help=HELP["tag"]
)
@click.option("--render-only", "render_dir", metavar="DIR", type=DIR, help=HELP["render_only"])
@click.option("--force", is_flag=True, help="With --render-only: replace gpuenv's files in a non-empty DIR.")
@click.option(
    "--base-image", metavar="REF", callback=grammar(validate.image_ref, "--base-image"), help=HELP["base_image"]
)
@click.option("--pin-base", is_flag=True, help="Look up the base image's digest now and build FROM it by digest.")
@click.option("--index-url", metavar="URL", callback=grammar(validate.url, "--index-url"), help=HELP["index_url"])
@click.option(
    "--wheelhouse",
    metavar="DIR",
    callback=on_disk(grammar(validate.existing_dir, "--wheelhouse")),
    help=HELP["wheelhouse"],
)
@click.option("--pip", multiple=True, metavar="PKG", callback=checked(validate.pip_requirement), help=HELP["pip"])
@click.option("--app", metavar="DIR", callback=on_disk(grammar(validate.existing_dir, "--app")), help=HELP["app"])
@click.option(
    "--build-arg",
    "build_args",
    multiple=True,
    metavar="NAME=VALUE",
    callback=checked(validate.build_arg),
    help=HELP["build_arg"],
)
@click.option(
    "--network",
    **choice(["default", "host", "none"], BuildRequest().network),
    help="Network for the build's RUN steps.",
)
@click.option("--no-cache", is_flag=True, help="Rebuild every layer.")
@click.option("--push", is_flag=True, help="Push every tag after the build and report the digests.")
@click.option("--verify", is_flag=True, help=HELP["verify"])
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@rollout_options
@click.pass_context
def build_image(ctx: click.Context, /, as_json: bool, **params: Any) -> int:
    """Render a Dockerfile matched to the stack and build the image through Docker.

    \b
    Examples:
      gpuenv build-image --cuda 11.7 --cudnn --os ubuntu20.04 --tag team/torch:cu117
      gpuenv build-image --spec cu128-ubuntu22.04 --push --tag registry:5000/torch:cu128
      gpuenv build-image --cuda 12.8 --flavor devel --gpu H100 --render-only ./ctx
      gpuenv build-image --rocm 6.4 --gpu MI300X --flavor devel --render-only ./ctx
      gpuenv build-image --stack stack.json --wheelhouse ./wheels --app . --verify

    Exit codes: 0 built, 1 a build step, push or verification failed, 2 bad request,
    3 Docker unreachable.
    """
    for name in SPEC_OVERRIDABLE:  # flag > environment > config file > spec > default
        if ctx.get_parameter_source(name) == ParameterSource.DEFAULT:
            params[name] = None
    fleet_check = rollout_gate(params, settings(ctx).data)
    quiet, verbose = settings(ctx).quiet, settings(ctx).verbose
    request = BuildRequest(stack=stack_request(params), **params)
    plan = plan_image(request, kb_path=settings(ctx).data, on_warning=warn)
    fleet_check(lambda: plan.stack, None)  # an image: before anything is written or built
    prepared, say = prepare(plan), _sayer(quiet)
    for line in prepared.messages():
        say(line)
    if request.render_dir is not None:
        return _render_only(prepared, request, as_json=as_json, say=say)
    with _progress(say, live=sys.stderr.isatty() and not quiet, verbose=verbose) as on_event:
        built = build(prepared, on_event=on_event, say=say)
    if as_json:
        emit_json(built.to_dict(prepared))
    return built.exit_code


def _render_only(prepared: Prepared, request: BuildRequest, *, as_json: bool, say: Callable[[str], None]) -> int:
    """Write the build context and say how to build it, building nothing."""
    written = write_rendered(prepared)
    if as_json:
        emit_json(written.to_dict(prepared))
        return 0
    say(os_line(prepared.plan.stack, request.stack, for_what="the image's base,"))
    click.echo(f"wrote {', '.join(written.files)} into {written.dest}")
    click.echo(
        f"build it with: docker build -t {shlex.quote(prepared.plan.tags[0])} "
        f"--platform {prepared.plan.docker_platform} {shlex.quote(str(written.dest))}"
    )
    return 0


def _sayer(quiet: bool) -> Callable[[str], None]:
    """Progress and notes go to stderr, so that stdout carries only the result (or the JSON)."""
    return (lambda text: None) if quiet else (lambda text: click.echo(printable(text), err=True))


@contextmanager
def _progress(say: Callable[[str], None], *, live: bool, verbose: int) -> Iterator[Callable[[Any], None]]:
    """Each build step as it starts (a live status line on a terminal), the build's output with -v."""
    status = console(stderr=True).status("building…") if live else None

    def on_event(event: Any) -> None:
        if event.kind == "step":
            text = f"step {event.step}/{event.total}: {event.text[:100]}"
            if status is not None:
                status.update(text)
            if not live or verbose:
                say(text)
        elif event.kind in ("cached", "output") and verbose:
            say("  (cached)" if event.kind == "cached" else f"  {event.text}")

    if status is None:
        yield on_event
        return
    with status:
        yield on_event
