"""A wheel of the very gpuenv that is running, for installing it into images and onto hosts.

Works from a source checkout (the top-level templates/, playbooks/ and images/ are mapped into
gpuenv/_shipped/ as the real build does) and from an installed wheel, with no build backend and
no network. The archive is reproducible (sorted entries, fixed timestamps), so an unchanged
gpuenv gives a byte-identical wheel and Docker reuses the layer that installs it.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from importlib import metadata
from pathlib import Path

from gpuenv import __version__
from gpuenv.requirements import declared
from gpuenv.resources import shipped_dir

_PACKAGE = Path(__file__).resolve().parent
_EPOCH = (1980, 1, 1, 0, 0, 0)
_WHEEL = "Wheel-Version: 1.0\nGenerator: gpuenv\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
_ENTRY_POINTS = "[console_scripts]\ngpuenv = gpuenv.cli:main\n"


def build_own_wheel(dest_dir: Path) -> Path:
    """Write gpuenv-<version>-py3-none-any.whl into dest_dir and return its path."""
    files = _package_files()
    dist_info = f"gpuenv-{__version__}.dist-info"
    extra = {
        f"{dist_info}/METADATA": _metadata().encode(),
        f"{dist_info}/WHEEL": _WHEEL.encode(),
        f"{dist_info}/entry_points.txt": _ENTRY_POINTS.encode(),
    }
    dest_dir.mkdir(parents=True, exist_ok=True)
    wheel = dest_dir / f"gpuenv-{__version__}-py3-none-any.whl"
    records: list[str] = []
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for arcname, data in [*((name, path.read_bytes()) for name, path in files), *extra.items()]:
            _write(archive, arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{arcname},sha256={digest},{len(data)}")
        records.append(f"{dist_info}/RECORD,,")
        _write(archive, f"{dist_info}/RECORD", ("\n".join(records) + "\n").encode())
    return wheel


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
