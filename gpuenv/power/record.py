"""What `gpuenv tune power --apply` kept: a record verify reads, run as any user, to tell a cap
gpuenv applied (info) from one nobody accounts for (a warning).

Where: /var/lib/gpuenv/power-applied.json (GPUENV_POWER_RECORD overrides it), written by root
0644 beside the power state file, removed by `tune power --restore`. Its reader trusts nothing:
a regular file, no symlink, owned by root or the running user, writable by nobody else, at most
64 KiB of strict JSON in this format; anything else is a RecordIgnored saying why.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuenv.errors import BadRequest
from gpuenv.files import read_own_file, write_atomic

ENV = "GPUENV_POWER_RECORD"
DEFAULT = Path("/var/lib/gpuenv/power-applied.json")
SCHEMA = "gpuenv.power-applied/1"
LIMIT = 64 * 1024
MAX_GPUS = 1024
MAX_MW = 10_000_000
HINT = "gpuenv tune power --apply writes it (root, mode 0644); remove the file to start afresh"


class RecordIgnored(Exception):
    """The record exists but cannot be trusted; the text says why."""


@dataclass(frozen=True)
class AppliedCap:
    index: int
    uuid: str | None
    applied_mw: int


def location(env: Mapping[str, str] | None = None) -> Path:
    given = (os.environ if env is None else env).get(ENV, "")
    return Path(given) if given else DEFAULT


def write(path: Path, caps: list[AppliedCap]) -> None:
    """Record the caps just applied (the folder is the power state's, made safe by its writer)."""
    data = {
        "schema": SCHEMA,
        "applied": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gpus": [{"index": c.index, "uuid": c.uuid, "applied_mw": c.applied_mw} for c in caps],
    }
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=2) + "\n", mode=0o644)


def remove(path: Path) -> None:
    path.unlink(missing_ok=True)


def read(path: Path) -> list[AppliedCap] | None:
    """The caps recorded, None when there is no record; RecordIgnored when it cannot be trusted."""
    if not os.path.lexists(path):
        return None
    try:
        raw = read_own_file(path, "power record", hint=HINT, owners=(0, os.geteuid()), limit=LIMIT)
        return _caps(json.loads(raw.decode("utf-8"), parse_constant=_no_constant))
    except BadRequest as exc:
        raise RecordIgnored(exc.message) from exc
    except (ValueError, RecursionError) as exc:
        raise RecordIgnored(f"power record {path} is not a {SCHEMA} record: {exc}") from exc


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _caps(data: Any) -> list[AppliedCap]:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"schema must be {SCHEMA!r}")
    gpus = data.get("gpus")
    if not isinstance(gpus, list) or len(gpus) > MAX_GPUS:
        raise ValueError(f"gpus: expected a list of at most {MAX_GPUS}")
    return [_cap(g, i) for i, g in enumerate(gpus)]


def _cap(gpu: Any, i: int) -> AppliedCap:
    if not isinstance(gpu, dict):
        raise ValueError(f"gpus[{i}]: expected an object")
    index, uuid, applied = gpu.get("index"), gpu.get("uuid"), gpu.get("applied_mw")
    if type(index) is not int or not 0 <= index < MAX_GPUS:
        raise ValueError(f"gpus[{i}].index: expected a whole number 0..{MAX_GPUS - 1}")
    if uuid is not None and (not isinstance(uuid, str) or len(uuid) > 100):
        raise ValueError(f"gpus[{i}].uuid: expected a short string or null")
    if type(applied) is not int or not 0 < applied <= MAX_MW:
        raise ValueError(f"gpus[{i}].applied_mw: expected a whole number 1..{MAX_MW}")
    return AppliedCap(index, uuid, applied)
