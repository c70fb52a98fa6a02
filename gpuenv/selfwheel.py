"""A wheel of the very gpuenv that is running, for installing it into images and onto hosts.

Works from a source checkout (the top-level templates/, playbooks/ and images/ are mapped into
gpuenv/_shipped/ as the real build does) and from an installed wheel, with no build backend and
no network. The archive is reproducible (sorted entries, fixed timestamps), so an unchanged
gpuenv gives a byte-identical wheel and Docker reuses the layer that installs it. `own_wheel`
keeps the wheel it builds in a cache keyed on the package's content, and copies it from there.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from gpuenv import __version__
from gpuenv.requirements import declared
from gpuenv.resources import shipped_dir

_PACKAGE = Path(__file__).resolve().parent
_EPOCH = (1980, 1, 1, 0, 0, 0)
_WHEEL = "Wheel-Version: 1.0\nGenerator: gpuenv\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
_ENTRY_POINTS = "[console_scripts]\ngpuenv = gpuenv.cli:main\n"
CACHED = 4  # wheels the cache keeps


def own_wheel(dest_dir: Path) -> Path:
    """gpuenv's own wheel in dest_dir: a copy of the one cached for this gpuenv's content, built and
    cached first where there is none (a checkout keeps its version across edits, so the key is the
    content). Where the cache cannot be written, built in dest_dir as build_own_wheel does."""
    files, meta = _package_files(), _metadata()
    cached = cache_dir() / f"gpuenv-{__version__}-{_content_key(files, meta)}.whl"
    if not cached.is_file():
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic_wheel(cached, files, meta)
        except OSError:  # a read-only or full cache: the wheel is built where it goes
            return build_own_wheel(dest_dir)
        _prune(cached)
    dest_dir.mkdir(parents=True, exist_ok=True)
    wheel = dest_dir / _wheel_name()
    shutil.copyfile(cached, wheel)
    return wheel


def build_own_wheel(dest_dir: Path) -> Path:
    """Write gpuenv-<version>-py3-none-any.whl into dest_dir and return its path."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    wheel = dest_dir / _wheel_name()
    _write_wheel(wheel, _package_files(), _metadata())
    return wheel


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where built wheels are kept: $XDG_CACHE_HOME/gpuenv/wheels, else ~/.cache/gpuenv/wheels."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "gpuenv" / "wheels"


def _wheel_name() -> str:
    return f"gpuenv-{__version__}-py3-none-any.whl"


def _content_key(files: list[tuple[str, Path]], meta: str) -> str:
    """What the wheel is made of, hashed: each file's name and bytes, and the metadata."""
    digest = hashlib.sha256(meta.encode())
    for arcname, path in files:
        data = path.read_bytes()
        digest.update(f"\0{arcname}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:20]


def _write_atomic_wheel(target: Path, files: list[tuple[str, Path]], meta: str) -> None:
    """Write the wheel beside target and rename it over: a reader never sees half a wheel."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        _write_wheel(Path(tmp), files, meta)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _prune(kept: Path) -> None:
    """Keep the cache small: the CACHED most recently made wheels (a checkout makes one per edit)."""
    wheels = sorted(kept.parent.glob("gpuenv-*.whl"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [w for w in wheels if w != kept][CACHED - 1 :]:
        with contextlib.suppress(OSError):
            old.unlink()


def _write_wheel(wheel: Path, files: list[tuple[str, Path]], meta: str) -> None:
    dist_info = f"gpuenv-{__version__}.dist-info"
    extra = {
        f"{dist_info}/METADATA": meta.encode(),
        f"{dist_info}/WHEEL": _WHEEL.encode(),
        f"{dist_info}/entry_points.txt": _ENTRY_POINTS.encode(),
    }
    records: list[str] = []
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for arcname, data in [*((name, path.read_bytes()) for name, path in files), *extra.items()]:
            _write(archive, arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{arcname},sha256={digest},{len(data)}")
        records.append(f"{dist_info}/RECORD,,")
        _write(archive, f"{dist_info}/RECORD", ("\n".join(records) + "\n").encode())


def _write(archive: zipfile.ZipFile, arcname: str, data: bytes) -> None:
    info = zipfile.ZipInfo(arcname, date_time=_EPOCH)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def _package_files() -> list[tuple[str, Path]]:
    """(name in the wheel, file) for the package and, from a checkout, the shipped folders."""
    found = {f"gpuenv/{p.relative_to(_PACKAGE).as_posix()}": p for p in _tree(_PACKAGE)}
    if not (_PACKAGE / "_shipped").is_dir():
        for name in ("templates", "playbooks", "images"):
            root = shipped_dir(name)
            found.update({f"gpuenv/_shipped/{name}/{p.relative_to(root).as_posix()}": p for p in _tree(root)})
    return sorted(found.items())


def _tree(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]


def _metadata() -> str:
    try:
        text = metadata.distribution("gpuenv").read_text("METADATA")
    except metadata.PackageNotFoundError:
        text = None
    if text:
        return text
    requires = "".join(f"Requires-Dist: {r}\n" for r in declared())
    return f"Metadata-Version: 2.1\nName: gpuenv\nVersion: {__version__}\nRequires-Python: >=3.10\n{requires}"
