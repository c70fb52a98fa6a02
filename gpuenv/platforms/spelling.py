"""One reading of every spelling users bring for a backend, from pip's, uv's and gpuenv's own habits.

- `--cuda 12.4 | 12.4.1 | 12 | cu124`, `--rocm 6.4 | 6.2.4 | rocm6.4`: the platform's own option, each
  spelling read by the platform that owns it (its resolve half's `release`);
- `--platform cpu | cuda | rocm`;
- a torch version's local tag: `2.4.0+cu121`, `2.6.0+rocm6.2.4`, `2.5.1+cpu`;
- uv's `--torch-backend NAME`: `cpu`, `cu126`, `rocm6.4` as the options they stand for, and `auto` as
  this machine (`--driver auto`).

A value no platform reads is exit 2 with the forms it takes.
"""

from __future__ import annotations

from gpuenv import validate
from gpuenv.errors import BadRequest
from gpuenv.platforms.registry import named, platform_of_build, platforms
from gpuenv.types import PlatformName

AUTO = "auto"  # uv's --torch-backend auto: this machine's GPUs; gpuenv reads its NVIDIA driver (--driver auto)


def option_value(name: PlatformName, value: str) -> str:
    """The value of a platform's option (--cuda, --rocm) as the user spelled it, once the platform reads it."""
    platform = named(name)
    text = value.strip()
    if platform.resolver.release(text) is None:
        raise BadRequest(
            f"invalid {platform.label} version: {value[:40]!r}", hint=f"e.g. {platform.resolver.spellings}"
        )
    return text


def torch_version(value: str) -> str:
    """A torch version whose local tag, if any, is a platform's build ("2.4.0+cu121", "2.5.1+cpu")."""
    validate.torch_version(value)
    build = value.partition("+")[2]
    if build and platform_of_build(build) is None:
        raise BadRequest(f"unknown build {build!r} in torch version {value!r}", hint=validate.TORCH_VERSIONS)
    return value


def torch_backend(name: str) -> dict[str, str]:
    """uv's --torch-backend NAME as the stack options it stands for."""
    text = name.strip().lower()
    if text == AUTO:
        return {"driver": AUTO}
    platform = platform_of_build(text)
    if platform is None:
        builds = ", ".join(p.resolver.builds_spelled for p in platforms())
        raise BadRequest(f"unknown torch backend {name[:40]!r}", hint=f"one of: {builds}, or {AUTO} (this machine)")
    return platform.resolver.asks(text)
