"""From a build-image request to a validated Plan: the stack, the image options, the tags."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from packaging.requirements import Requirement

from gpuenv import validate
from gpuenv.errors import BadRequest
from gpuenv.kb import OsInfo
from gpuenv.platforms.registry import for_stack
from gpuenv.render.context import check_destination, check_wheelhouse
from gpuenv.render.images import find_spec, load_spec, spec_options, with_packages
from gpuenv.render.options import ImageOptions
from gpuenv.resolve.request import Request
from gpuenv.stack import Stack
from gpuenv.stack_service import StackRequest, Warn, os_facts, stack_for

Network = Literal["default", "host", "none"]
SPEC_OVERRIDABLE = ("flavor", "cudnn", "slim", "with_packages")  # a spec sets them; the command line wins


@dataclass(frozen=True)
class BuildRequest:
    """What build-image was asked. None for flavor/cudnn/slim/with_: not set, so a spec's value or the default."""

    stack: StackRequest = field(default_factory=StackRequest)
    spec: str | None = None
    flavor: str | None = None
    cudnn: bool | None = None
    with_: tuple[str, ...] | None = None
    slim: bool | None = None
    tags: tuple[str, ...] = ()
    render_dir: Path | None = None
    force: bool = False
    base_image: str | None = None
    pin_base: bool = False
    index_url: str | None = None
    wheelhouse: Path | None = None
    pip: tuple[str, ...] = ()
    app: Path | None = None
    build_args: tuple[str, ...] = ()
    network: Network = "default"
    no_cache: bool = False
    push: bool = False
    verify: bool = False


@dataclass(frozen=True)
class Plan:
    """Everything build-image was asked to do, validated."""

    request: BuildRequest
    stack: Stack
    options: ImageOptions
    tags: tuple[str, ...]
    os_info: OsInfo  # the knowledge base's row for the stack's OS

    @property
    def docker_platform(self) -> str:
        """The platform Docker builds the image for: the stack's CPU architecture ("linux/arm64")."""
        return for_stack(self.stack).cpu_arch.docker

    @property
    def buildargs(self) -> dict[str, str]:
        return dict(arg.split("=", 1) for arg in self.request.build_args)


# What an option neither given nor set by a spec falls back to: ImageOptions' own defaults.
DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ImageOptions) if f.name in SPEC_OVERRIDABLE}


def plan_image(request: BuildRequest, *, kb_path: Path | None, on_warning: Warn | None = None) -> Plan:
    """Validate the request's combinations, resolve its stack and work out the image options and tags."""
    _check_combinations(request)
    stack, spec_values, spec_tag = _stack(request, kb_path=kb_path, on_warning=on_warning)
    options = _options(request, spec_values)
    if request.push and not request.tags and not spec_tag:
        raise BadRequest(
            "--push needs a --tag naming the registry", hint="e.g. --tag registry.example.com:5000/torch:cu117"
        )
    tags = request.tags or ((spec_tag,) if spec_tag else (_default_tag(stack, options),))
    _check_inputs(request, stack, options)
    return Plan(request, stack, options, tuple(tags), os_facts(stack, kb_path=kb_path))


def _check_combinations(request: BuildRequest) -> None:
    if request.render_dir is not None and (request.push or request.verify):
        raise BadRequest(
            "--render-only builds nothing, so it cannot --push or --verify",
            hint="drop --render-only, or build the rendered directory later",
        )
    if request.force and request.render_dir is None:
        raise BadRequest("--force only applies to --render-only", hint="add --render-only DIR")


def _stack(
    request: BuildRequest, *, kb_path: Path | None, on_warning: Warn | None
) -> tuple[Stack, dict[str, Any], str | None]:
    if request.spec is None:
        return stack_for(request.stack, kb_path=kb_path, on_warning=on_warning), {}, None

    if request.stack.stack_file is not None:
        raise BadRequest("--spec and --stack both name a stack", hint="give one of them")
    spec = load_spec(find_spec(request.spec))
    constraints = Request(**{**spec.stack, **request.stack.constraints.given()})  # the command line wins
    stack = stack_for(replace(request.stack, constraints=constraints), kb_path=kb_path, on_warning=on_warning)
    return stack, spec_options(spec), spec.tag


def _options(request: BuildRequest, spec_values: dict[str, Any]) -> ImageOptions:

    given = {
        "flavor": request.flavor,
        "cudnn": request.cudnn,
        "slim": request.slim,
        "with_packages": None if request.with_ is None else with_packages(request.with_),
    }
    values: dict[str, Any] = {
        key: value if value is not None else spec_values.get(key, DEFAULTS[key]) for key, value in given.items()
    }
    app = request.app
    return ImageOptions(
        **values,
        pip=(*spec_values.get("pip", ()), *request.pip),
        base_image=request.base_image,
        index_url=request.index_url,
        wheelhouse=request.wheelhouse is not None,
        app=app is not None,
        app_requirements=app is not None and (app / "requirements.txt").is_file(),
    )


def _check_inputs(request: BuildRequest, stack: Stack, options: ImageOptions) -> None:
    if request.wheelhouse is not None:
        pins = {"torch": stack.torch, **{n: str(getattr(stack, n)) for n in options.with_packages}}
        names = tuple(Requirement(r).name for r in (*options.gpuenv_requirements, *options.pip))
        names += for_stack(stack).image.wheelhouse_needs
        check_wheelhouse(request.wheelhouse, pins, names)
    if request.render_dir is not None:
        check_destination(request.render_dir, force=request.force, app=request.app)


def _default_tag(stack: Stack, options: ImageOptions) -> str:
    flavor = options.flavor + ("-cudnn" if options.cudnn and options.flavor == "runtime" else "")
    flavor += "-slim" if options.slim else ""
    tag = f"gpuenv/pytorch:{stack.torch}-{stack.build}-py{stack.python}-{stack.os}-{flavor}"
    tag += for_stack(stack).cpu_arch.tag_suffix
    return validate.image_ref(tag, "default tag")


def os_line(stack: Stack, request: StackRequest, *, for_what: str) -> str:
    """Which OS the rendered files are for, and why (a default said aloud, never assumed silently)."""
    if request.stack_file is not None:
        return f"OS: {stack.os}, from the stack file {request.stack_file}"
    if request.constraints.os is not None:
        return f"OS: {stack.os} (--os)"
    return f"OS: {stack.os}, the default: {for_what} give --os for another"
