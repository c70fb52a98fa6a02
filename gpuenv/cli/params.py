"""Click glue shared by the commands: validating callbacks, and the options several commands share
(the verify options, the GPU history's; the hosts' are in host_params, the stack's in stack_params)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from gpuenv import config, validate
from gpuenv.errors import BadRequest
from gpuenv.files import check_output
from gpuenv.types import DEVICE_CHOICES, LEVELS, SITE_PREFIX
from gpuenv.verify.options import SiteOptions
from gpuenv.verify.registry import ALIASES, CHECKS

F = TypeVar("F", bound=Callable[..., Any])


def checked(check: Callable[[Any], Any]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A Click callback running a gpuenv.validate grammar over an option's value (each one, if repeated).

    The same callback checks a value from the command line, the environment or the config file.
    """

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        try:
            return tuple(check(v) for v in value) if isinstance(value, tuple) else check(value)
        except BadRequest as exc:
            if ctx.get_parameter_source(param.name or "") == ParameterSource.ENVIRONMENT:
                raise BadRequest(f"{param.envvar}: {exc.message}", hint=exc.hint) from exc
            raise

    return callback


# ctx.meta key: `gpuenv config show` parses a command only to show its settings
SHOWING_SETTINGS = "gpuenv.showing-settings"


def on_disk(callback: Callable[[click.Context, click.Parameter, Any], Any]) -> Callable[..., Any]:
    """A callback that looks at this machine's disk (a folder exists, an output can be written): it
    checks when the command runs, not while `gpuenv config show` parses the command to show its
    settings, where a default such as /etc/slurm need not exist."""

    def looking(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        return value if ctx.meta.get(SHOWING_SETTINGS) else callback(ctx, param, value)

    return looking


def version_of(what: str, *, strip: str = "") -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A callback checking a version; strip: leading characters to drop first ("R580" -> "580")."""
    return checked(lambda v: validate.version(v.lstrip(strip), what))


def choice(values: tuple[str, ...] | list[str], default: str) -> dict[str, Any]:
    """Option settings for one of VALUES, DEFAULT shown in the help."""
    return {"type": click.Choice(values), "default": default, "show_default": True}


def grammar(check: Callable[[str, str], Any], what: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A callback running a validator that names what it checks, e.g. grammar(validate.url, "--index-url")."""
    return checked(lambda v: check(v, what))


def _output_path(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """Every output is checked before any work starts (the rule is gpuenv.files')."""
    if value is None:
        return None
    check_output(str(value), f"--{param.name}")
    return value


def output_option(name: str, help_text: str, *, short: str | None = None) -> Callable[[F], F]:
    """An output file option (- for stdout), checked before any work starts."""
    names = (short, name) if short else (name,)
    path = click.Path(path_type=Path)
    return click.option(*names, type=path, metavar="FILE", callback=on_disk(_output_path), help=help_text)


def gpu_indices(text: str) -> tuple[int, ...]:
    """--gpus 0,3 (as dcgmi diag -i): unique non-negative GPU indices, in the order given."""
    tokens = [token.strip() for token in text.split(",")]
    if not all(re.fullmatch(r"[0-9]{1,4}", token) for token in tokens):
        raise BadRequest(
            f"--gpus {text!r}: not a list of GPU indices", hint="give indices separated by commas, e.g. --gpus 0,3"
        )
    indices = tuple(int(token) for token in tokens)
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    if repeated:
        raise BadRequest(f"--gpus {text!r} names GPU {repeated[0]} twice", hint="name each GPU once")
    return indices


class CheckName(click.Choice):  # type: ignore[type-arg]
    """One of gpuenv's checks (by its name, or an alias: `health` is the check reports call nvml), or a
    site check's name (site.NAME): which site checks a host has is known only where they are enabled
    (verify says when one is not)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.startswith(SITE_PREFIX):
            site_check_name(value.removeprefix(SITE_PREFIX), f"--check {value}")
            return value
        named = super().convert(value, param, ctx)
        return ALIASES.get(named, named)


CHECK_NAMES = CheckName([*ALIASES, *(c.name for c in CHECKS)])


def site_check_name(value: str, what: str = "--plugin") -> str:
    """A site check's own name: lower case letters, digits, - and _, starting with a letter (at most 40)."""
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,39}", value):
        raise BadRequest(
            f"invalid {what}: {value[:60]!r}",
            hint="a site check's name is lower case letters, digits, - and _, starting with a letter",
        )
    return value


def _verify_declarations(flag: str) -> dict[str, dict[str, Any]]:
    """gpuenv verify's options that fleet verify and provision pass on to it, by their name in verify."""
    return {
        "level": choice(LEVELS, "quick"),
        "check": {"multiple": True, "type": CHECK_NAMES},
        "checks-dir": {"metavar": "DIR", "callback": grammar(validate.safe_path, flag)},
        "plugin": {"multiple": True, "metavar": "NAME", "callback": checked(site_check_name)},
        "all-plugins": {"is_flag": True},
        "device": choice(DEVICE_CHOICES, "auto"),
        "expect-gpus": {"type": click.IntRange(min=1), "metavar": "N"},
        "strict": {"is_flag": True},
        "timeout": {"type": float, "callback": checked(lambda v: validate.seconds(v, flag)), "metavar": "SECONDS"},
        "image": {"metavar": "TAG", "callback": grammar(validate.image_ref, "--image")},
    }


def verify_option(key: str, help_text: str | None = None, *, flag: str | None = None) -> Callable[[F], F]:
    """One of gpuenv verify's options, declared here once for verify, fleet verify and provision.

    key: its name in verify (level, check, device, expect-gpus, strict, timeout, image); flag: its
    name where another command calls it otherwise (--verify-level, --check-timeout); each command
    words the help for what the option does there.
    """
    name = flag or f"--{key}"
    dest = {"check": ("checks",), "plugin": ("plugins",), "--check-timeout": ("check_timeout_s",)}
    words = help_text or VERIFY_HELP.get(key)
    return click.option(name, *dest.get(key, dest.get(name, ())), help=words, **_verify_declarations(name)[key])


# the help of a shared verify option where the command words none of its own
VERIFY_HELP = {
    "level": "How thorough verify is: quick (seconds), standard or deep (minutes).",
    "device": "Device verify certifies on.",
    "checks-dir": "Also run the site's own checks: the programs in DIR (docs/verify.md, Site checks).",
    "plugin": "Also run this site check, installed as an entry point in gpuenv.checks (repeatable).",
    "all-plugins": "Also run every site check installed as an entry point (gpuenv info lists them).",
}


def site_request(params: dict[str, Any]) -> SiteOptions:
    """Take --checks-dir, --plugin and --all-plugins out of a command's parameters."""
    return SiteOptions(**{key: params.pop(key) for key in ("checks_dir", "plugins", "all_plugins")})


def site_options(func: F) -> F:
    """--checks-dir, --plugin and --all-plugins: the site checks verify runs besides gpuenv's own."""
    for key in reversed(("checks-dir", "plugin", "all-plugins")):
        func = verify_option(key)(func)
    return func


def history_options(func: F) -> F:
    """Add --history FILE and --no-history (fleet verify and fleet report record every report they read)."""
    options = [
        click.option(
            "--history",
            type=click.Path(dir_okay=False, path_type=Path),
            metavar="FILE",
            help="GPU history (SQLite, on local disk) [default: $XDG_STATE_HOME/gpuenv/history.sqlite].",
        ),
        click.option("--no-history", is_flag=True, help="Record nothing in the GPU history."),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


def history_path(params: dict[str, Any]) -> Path | None:
    """Take --history and --no-history out of a command's parameters: the file to record in, or None."""
    given: Path | None = params.pop("history")
    if params.pop("no_history"):
        if given is not None:
            raise BadRequest("--history and --no-history exclude each other", hint="use one")
        return None
    if given is not None:
        validate.safe_path(str(given), "--history")
        return given
    return config.history_file()
