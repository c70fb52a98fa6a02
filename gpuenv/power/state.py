"""The power state file: the original limits, written before the first change, removed once they
are back. After a SIGKILL or a power loss it is what `gpuenv tune power --restore` reads.

Where: $XDG_STATE_HOME/gpuenv/power-state.json when XDG_STATE_HOME is set; else root's is
/var/lib/gpuenv/power-state.json and anyone else's ~/.local/state/gpuenv/power-state.json.
Written atomically (gpuenv.files); a folder another user could write into is refused, so nobody
but the owner can plant the limits root will put back.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuenv.errors import BadRequest
from gpuenv.files import read_own_file, write_atomic
from gpuenv.power.core import PowerState

NAME = "power-state.json"
ROOT_FOLDER = Path("/var/lib/gpuenv")


def location(env: Mapping[str, str], euid: int) -> Path:
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "gpuenv" / NAME
    if euid == 0:
        return ROOT_FOLDER / NAME
    return Path(env.get("HOME", "~")).expanduser() / ".local" / "state" / "gpuenv" / NAME


def _safe_folder(folder: Path) -> None:
    """The folder exists (made 0755 if not), is a real folder, is ours and only we may write in it."""
    try:
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        info = folder.lstat()
    except OSError as exc:
        raise BadRequest(f"cannot make the state folder {folder}: {exc.strerror}", hint="check its parent") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise BadRequest(f"the state folder {folder} is not a folder (a link?)", hint="remove it; gpuenv makes it")
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise BadRequest(
            f"the state folder {folder} belongs to another user or others may write in it",
            hint=f"chown {os.geteuid()} {folder} && chmod go-w {folder}",
        )


def read(path: Path) -> PowerState | None:
    """The state in the file, None when there is none. Root puts back the limits it holds, so the
    file must be ours alone (a regular file, no symlink, nobody else may write it) and hold a state
    this gpuenv wrote, every figure finite; anything else is a bad request and nothing is set."""
    if not path.exists() and not path.is_symlink():
        return None
    hint = f"look at it; if every GPU is at the limit you want, remove {path}"
    raw = read_own_file(path, "power state file", hint=hint)
    try:
        data = json.loads(raw.decode("utf-8"), parse_float=_finite_or_marked, parse_constant=_NotFinite)
        where = _not_finite_at(data, "")
        if where is not None:
            raise ValueError(f"{where}: not a finite number (strict JSON: no NaN, Infinity or 1e400)")
        return PowerState.from_dict(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise BadRequest(f"power state file {path}: {why}", hint=hint) from exc


class _NotFinite:
    """A number JSON has no place for (NaN, Infinity) or none a float can hold (1e400), as written."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _finite_or_marked(text: str) -> float | _NotFinite:
    value = float(text)
    return value if math.isfinite(value) else _NotFinite(text)


def _not_finite_at(data: Any, where: str) -> str | None:
    """The field (e.g. gpus[0].original_mw) of the first number that is not finite, or None."""
    if isinstance(data, _NotFinite):
        return where or "the file"
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        found = _not_finite_at(value, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip("."))
        if found is not None:
            return found
    return None


def write(path: Path, state: PowerState) -> None:
    _safe_folder(path.parent)
    write_atomic(path, json.dumps(state.to_dict(), indent=2) + "\n", mode=0o644)


def remove(path: Path) -> None:
    path.unlink(missing_ok=True)


def running(pid: int) -> bool:
    """Whether a gpuenv process with this pid runs now (a pid reused by another program is not)."""
    if pid == os.getpid():
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"gpuenv" in cmdline
