"""gpuenv's own run-time dependencies, read from its package metadata (pyproject.toml is their one home).

Images and hosts install gpuenv's wheel with --no-deps beside a stack that already pins torch and
numpy, so they need the base dependencies plus what `gpuenv verify` adds (the `verify` extra) less
those two. `python -m gpuenv.requirements` prints them, one a line, for pip download and the tests.
"""

from __future__ import annotations

import re
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

VERIFY_EXTRA = "verify"
PINNED_BY_STACK = ("torch", "numpy")
_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
_EXTRA_MARKER = re.compile(r"""^extra\s*==\s*["']([\w.-]+)["']$""")


@lru_cache(maxsize=1)
def declared() -> tuple[str, ...]:
    """Requires-Dist lines of the installed gpuenv, or of the checkout's pyproject.toml."""
    try:
        found = metadata.requires("gpuenv")
    except metadata.PackageNotFoundError:
        found = None
    if found is not None:
        return tuple(found)
    return _from_pyproject(_PYPROJECT)


def _from_pyproject(path: Path) -> tuple[str, ...]:
    project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines += [f'{r}; extra == "{extra}"' for r in requirements]
    return tuple(lines)


def gpuenv_requirements() -> tuple[str, ...]:
    """What an image or host installs beside gpuenv's wheel: base dependencies and the verify extra's."""
    wanted: list[str] = []
    for line in declared():
        requirement = Requirement(line)
        extra = _EXTRA_MARKER.match(str(requirement.marker or ""))
        if requirement.marker is not None and (extra is None or extra.group(1) != VERIFY_EXTRA):
            continue
        if requirement.name.lower() not in PINNED_BY_STACK:
            requirement.marker = None
            wanted.append(str(requirement))
    return tuple(wanted)


if __name__ == "__main__":
    sys.stdout.write("".join(f"{r}\n" for r in gpuenv_requirements()))
