"""Where the shipped files live: inside the wheel, or at the top of a source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_SHIPPED = ("templates", "playbooks", "images")


def data_file(name: str) -> Path:
    """A file of the package's own data (gpuenv/data/NAME)."""
    return _PACKAGE / "data" / name


def shipped_dir(name: str) -> Path:
    """One of the top-level folders that the wheel carries under gpuenv/_shipped/."""
    if name not in _SHIPPED:
        raise ValueError(f"not a shipped folder: {name}")
    in_wheel = _PACKAGE / "_shipped" / name
    if in_wheel.is_dir():
        return in_wheel
    return _PACKAGE.parent / name
