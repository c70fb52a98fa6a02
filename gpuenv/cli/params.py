"""Click glue shared by the commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def checked(check: Callable[[Any], Any]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A Click callback running a gpuenv.validate grammar over an option's value (each one, if repeated)."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, tuple):
            return tuple(check(v) for v in value)
        return check(value)

    return callback
