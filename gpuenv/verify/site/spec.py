"""What a site check declares (name, levels, time limit, needs), checked against the schema
gpuenv/data/schemas/site-check.schema.json, and the spec the engine orders and runs it by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gpuenv import schema
from gpuenv.errors import BadRequest
from gpuenv.types import LEVELS, SITE_PREFIX, Level

API = 1  # the version of the site check contract (gpuenv.sitecheck, the executable's) this gpuenv speaks
Kind = Literal["python", "program"]


@dataclass(frozen=True)
class SiteSpec:
    """A site check as the engine sees it; the same interface as registry.CheckSpec."""

    name: str  # site.<declared name>
    kind: Kind
    origin: str  # where it came from, for --list-checks and the report
    target: str  # the entry point's "module:attribute", or the program's path
    levels: tuple[Level, ...]
    timeouts: tuple[float | None, float | None, float | None]  # at quick, standard, deep
    needs_gpu: bool = False
    needs_torch: bool = False
    about: str = ""
    identity: tuple[int, int] | None = None  # a program's (device, inode) when it was read
    needs: tuple[str, ...] = ("host",)
    provides: tuple[str, ...] = ()

    @property
    def exclusive_gpus(self) -> bool:  # a program's GPU work runs in a process of its own
        return self.needs_gpu and self.kind == "program"

    @property
    def context_in_worker(self) -> bool:  # a Python check's GPU work runs in the worker
        return self.needs_gpu and self.kind == "python"

    def runs_at(self, level: str) -> bool:
        return level in self.levels

    def timeout(self, level: str) -> float:
        limit = self.timeouts[LEVELS.index(level)]  # type: ignore[arg-type]
        return float(limit) if limit is not None else 0.0


def declared(data: Any, *, kind: Kind, origin: str, target: str, where: str) -> SiteSpec:
    """The spec a declaration makes (a header, a side TOML, a Check's fields); exit 2 naming
    `where` when it breaks the schema, declares an API this gpuenv does not speak, or leaves a
    level it runs at without a time limit."""
    hint = "see docs/verify.md (Site checks) for what a site check declares"
    try:
        schema.check(data, "site-check")
    except schema.SchemaViolation as exc:
        raise BadRequest(f"{where}: {exc}", hint=hint) from None
    if data.get("api", API) > API:
        raise BadRequest(f"{where}: written for site check API {data['api']}; this gpuenv speaks {API}", hint=hint)
    levels = tuple(level for level in LEVELS if level in data.get("levels", LEVELS))
    limit = data["timeout"]
    timeouts = tuple(limit.get(level) if isinstance(limit, dict) else limit for level in LEVELS)
    unlimited = [level for level in levels if timeouts[LEVELS.index(level)] is None]
    if unlimited:
        raise BadRequest(f"{where}: timeout gives no limit for level {', '.join(unlimited)}", hint=hint)
    needs = data.get("needs", [])
    return SiteSpec(
        name=SITE_PREFIX + data["name"],
        kind=kind,
        origin=origin,
        target=target,
        levels=levels,
        timeouts=timeouts,  # type: ignore[arg-type]
        needs_gpu="gpu" in needs,
        needs_torch="torch" in needs,
        about=data.get("about", ""),
    )
