"""`gpuenv slurm install`: the three hook scripts put in place, as NHC's packaging puts its own.

All or nothing: every target is checked before any is written; each is written atomically (a
temporary file renamed over it) with mode 0755. A file there that gpuenv did not write is never
replaced: the install is refused and names it.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from gpuenv.errors import BadRequest
from gpuenv.files import write_atomic
from gpuenv.slurm.core import ConfigRequest, hook_scripts, is_our_script

MODE = 0o755
MAX_SCRIPT_BYTES = 4096  # a hook script gpuenv wrote is one line; a bigger file is someone else's


@dataclass(frozen=True)
class Installed:
    path: Path
    action: str  # "written", "updated", "unchanged"


def install_hooks(dest: Path, req: ConfigRequest) -> list[Installed]:
    """Write the hook scripts into dest; refuse (exit 2) when one of the targets is not gpuenv's."""
    try:
        scripts = hook_scripts(req)
    except ValueError as exc:
        raise BadRequest(str(exc), hint="choose paths without spaces") from exc
    plan = [(dest / name, text, _action(dest / name, text)) for name, text in scripts.items()]
    for path, text, action in plan:
        if action != "unchanged":
            write_atomic(path, text, mode=MODE)
        elif stat.S_IMODE(path.stat().st_mode) != MODE:
            path.chmod(MODE)
    return [Installed(path, action) for path, _, action in plan]


def _action(path: Path, text: str) -> str:
    if not path.exists() and not path.is_symlink():
        return "written"
    held = _existing(path)
    if held is None or not is_our_script(held):
        raise BadRequest(
            f"{path} exists and is not a gpuenv hook script: left unchanged (nothing installed)",
            hint="move it aside, or give another --dest",
        )
    return "unchanged" if held == text else "updated"


def _existing(path: Path) -> str | None:
    """The text of a regular file of plausible size, else None (a link, a folder, a big or binary file)."""
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SCRIPT_BYTES:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
