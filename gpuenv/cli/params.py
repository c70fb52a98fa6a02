"""Click glue shared by the commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from gpuenv.errors import BadRequest


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
