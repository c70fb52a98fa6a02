"""Writes a rendered image into a build-context directory, with the files it copies in.

The context holds the rendered text files, a wheel of the running gpuenv (gpuenv-wheel/), and
on request the user's project (app/) and a wheelhouse (wheels/). Nothing is written outside
the directory given; a non-empty directory is refused unless `force`, and then only the
entries gpuenv owns are replaced.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from gpuenv.errors import BadRequest, CannotRun
from gpuenv.files import check_tree, replace_owned, wheelhouse_files, write_manifest
from gpuenv.render.dockerfile import RenderedImage
from gpuenv.selfwheel import own_wheel

WHEEL_DIR = "gpuenv-wheel"
WHEELS_DIR = "wheels"
APP_DIR = "app"
_IGNORED_IN_APP = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".venv", ".mypy_cache", ".pytest_cache")


def check_destination(dest: Path, *, force: bool, app: Path | None = None) -> None:
    """Refuse a non-empty directory (unless force) and a directory inside the app it would copy."""
    if dest.exists() and not dest.is_dir():
        raise BadRequest(f"{dest} exists and is not a directory", hint="name a new or empty directory")
    if dest.is_dir() and any(dest.iterdir()) and not force:
        hint = "name an empty directory, or add --force to replace gpuenv's files in it"
        raise BadRequest(f"{dest} is not empty", hint=hint)
    if app is not None and dest.resolve().is_relative_to(app.resolve()):
        raise BadRequest(f"{dest} lies inside the app directory {app}", hint="render into a directory outside the app")
    if app is not None:
        check_tree(app, "--app", ignore=_IGNORED_IN_APP)


def check_wheelhouse(wheelhouse: Path, pins: dict[str, str], names: tuple[str, ...] = ()) -> None:
    """Every pinned package (torch, its companions) must have a wheel there, and every other
    package named some wheel: fail now, not mid-build. (Their dependencies pip checks itself.)"""
    found: dict[str, set[Version]] = {}
    for wheel in (w for w in wheelhouse_files(wheelhouse) if w.suffix == ".whl"):
        try:
            name, wheel_version, _, _ = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        found.setdefault(str(name), set()).add(Version(wheel_version.public))
    for package, version in pins.items():
        if Version(version) not in found.get(str(canonicalize_name(package)), set()):
            raise BadRequest(
                f"the wheelhouse {wheelhouse} has no wheel of {package}=={version}",
                hint=f"add it: pip download -d {wheelhouse} {package}=={version} (on a machine with access)",
            )
    for package in names:
        if str(canonicalize_name(package)) not in found:
            raise BadRequest(
                f"the wheelhouse {wheelhouse} has no wheel of {package}",
                hint=f"add it: pip download -d {wheelhouse} {package} (on a machine with access)",
            )


def write_context(
    rendered: RenderedImage,
    dest: Path,
    *,
    wheelhouse: Path | None = None,
    app: Path | None = None,
    force: bool = False,
) -> list[str]:
    """Write the context; returns the top-level entries written."""
    check_destination(dest, force=force, app=app)
    dirs = [WHEEL_DIR, *([WHEELS_DIR] if wheelhouse else []), *([APP_DIR] if app else [])]
    created = not dest.exists()
    if dest.is_dir():
        replace_owned(dest, list(rendered.files), dirs)  # refuses before anything is removed
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for name, text in rendered.files.items():
            (dest / name).write_text(text, encoding="utf-8")
        own_wheel(dest / WHEEL_DIR)
        written = [*rendered.files, WHEEL_DIR]
        if wheelhouse is not None:
            _copy_wheels(wheelhouse, dest / WHEELS_DIR)
            written.append(WHEELS_DIR)
        if app is not None:
            shutil.copytree(app, dest / APP_DIR, symlinks=True, ignore=_IGNORED_IN_APP)
            written.append(APP_DIR)
        write_manifest(dest, written)
    except OSError as exc:
        if created:  # nothing half-written is left behind
            shutil.rmtree(dest, ignore_errors=True)
        message = f"cannot write the build context in {dest}: {exc}"
        raise CannotRun(message, hint="check the path and free space") from exc
    return written


def _copy_wheels(source: Path, dest: Path) -> None:
    """Hard-link wheels when the filesystem allows (a torch wheel is large), else copy them."""
    dest.mkdir()
    for wheel in (w for w in wheelhouse_files(source) if w.suffix == ".whl"):
        try:
            os.link(wheel, dest / wheel.name)
        except OSError:
            shutil.copy2(wheel, dest / wheel.name)
