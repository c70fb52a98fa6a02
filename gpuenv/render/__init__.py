"""Pure rendering: templates in, text out. Writing files and building images happen elsewhere."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2


@lru_cache(maxsize=8)
def jinja_env(template_dir: Path, *, trim_blocks: bool = True) -> jinja2.Environment:
    """A strict Jinja environment over one template folder.

    StrictUndefined turns a missing value into an error instead of an empty string, and
    keep_trailing_newline keeps rendered files byte-stable. Nothing is escaped: the output is
    Dockerfiles and YAML, never HTML, and every value is validated before it reaches a template.
    """
    import jinja2  # heavy: only rendering needs it, not `gpuenv --help` or resolve

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=trim_blocks,
        lstrip_blocks=trim_blocks,
        autoescape=False,
    )
