"""Site check packages for the tests: a wheel of a small pure-Python project built by zipping its
files (no build backend, no network), installed with pip into a folder put on PYTHONPATH."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from gpuenv.schema import parse_toml
from tests.conftest import REPO

EXAMPLE = REPO / "docs" / "examples" / "site-check"  # the documented example package


def build_wheel(project: Path, dest: Path) -> Path:
    """The wheel of a project laid out as the example: pyproject.toml (name, version, entry points)
    and its packages under src/."""
    meta = parse_toml((project / "pyproject.toml").read_text())["project"]
    name, version = meta["name"].replace("-", "_"), meta["version"]
    info = f"{name}-{version}.dist-info"
    groups = meta.get("entry-points", {})
    entry_points = "".join(
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in points.items())
        for group, points in groups.items()
    )
    files = {str(p.relative_to(project / "src")): p.read_bytes() for p in sorted((project / "src").rglob("*.py"))}
    files |= {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": entry_points.encode(),
    }
    record = [f"{n},sha256={_digest(d)},{len(d)}" for n, d in files.items()] + [f"{info}/RECORD,,"]
    wheel = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for arcname, data in {**files, f"{info}/RECORD": "\n".join(record).encode()}.items():
            archive.writestr(arcname, data)
    return wheel


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def install(wheel: Path, target: Path) -> Path:
    """pip installs the wheel into `target` (a folder for PYTHONPATH), offline and without dependencies."""
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*pip, "--target", str(target), str(wheel)], check=True, timeout=120, capture_output=True)
    return target
