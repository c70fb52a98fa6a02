"""Finite numbers for Click options: a float option refuses nan and inf wherever its value came from.

Apart from cli.params so that the group (cli.config_options, loaded by every command and `--help`)
does not load the shared options' services with it."""

from __future__ import annotations

import math
from typing import Any

import click
from click.core import ParameterSource

from gpuenv.errors import BadRequest


class _FiniteFloat(click.types.FloatParamType):
    """A float that is a number: nan and inf (1e309 is inf) would switch a judgement off or a budget out."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return _finite(super().convert(value, param, ctx), value, self, param, ctx)


class _FiniteFloatRange(click.FloatRange):
    """A FloatRange that refuses nan (which compares false with either bound, so passes the range)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = _finite(click.FLOAT.convert(value, param, ctx), value, self, param, ctx)
        return super().convert(number, param, ctx)


def _finite(
    number: float, given: Any, kind: click.ParamType[Any], param: click.Parameter | None, ctx: click.Context | None
) -> float:
    """The number, when finite; else a bad request naming where it came from: the flag or the variable
    (a value from the config file is refused before, naming the file and the key)."""
    if math.isfinite(number):
        return number
    if param is None:
        raise BadRequest(f"invalid {kind.name}: {given!r} is not a finite number", hint="give a number such as 3.5")
    from_env = ctx is not None and ctx.get_parameter_source(param.name or "") == ParameterSource.ENVIRONMENT
    name = str(param.envvar) if from_env else max(param.opts, key=len)
    raise BadRequest(f"invalid {name}: {given!r} is not a finite number", hint="give a number such as 3.5")


def finite_float(kind: click.ParamType[Any]) -> click.ParamType[Any]:
    """The same type for anything but a float; a float (or a float range) that takes finite numbers only."""
    if isinstance(kind, (_FiniteFloat, _FiniteFloatRange)):
        return kind
    if isinstance(kind, click.FloatRange):
        return _FiniteFloatRange(kind.min, kind.max, min_open=kind.min_open, max_open=kind.max_open, clamp=kind.clamp)
    if isinstance(kind, click.types.FloatParamType):
        return _FiniteFloat()
    return kind
