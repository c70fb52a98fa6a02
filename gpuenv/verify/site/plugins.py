"""Site checks from Python packages: entry points in the group `gpuenv.checks`, each naming a
gpuenv.sitecheck.Check. Only the entry points a run enables are imported; run_python runs one in
the verify worker, under the engine's watchdog like any check."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from importlib import import_module
from pathlib import Path
from typing import Any

from gpuenv.errors import BadRequest, CannotRun
from gpuenv.installed import EntryPoint, entry_points
from gpuenv.sitecheck import GROUP, Check, Context
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult
from gpuenv.verify.site.answers import from_python
from gpuenv.verify.site.spec import SiteSpec, declared

HINT = "pip install the site's checks package into gpuenv's environment; `gpuenv info` lists the installed ones"


def installed() -> list[EntryPoint]:
    """The entry points of the group, as installed (none imported)."""
    return entry_points(GROUP)


def load(names: tuple[str, ...], *, every: bool) -> list[SiteSpec]:
    """The enabled entry points' checks (every one with `every`), imported and declared; exit 2
    for a name no package gives (or two do), or a declaration the schema refuses; exit 3 when a
    module cannot be imported."""
    by_name: dict[str, list[EntryPoint]] = {}
    for point in installed():
        by_name.setdefault(point.name, []).append(point)
    wanted = sorted(by_name) if every else list(dict.fromkeys(names))
    for name in wanted:
        points = by_name.get(name)
        if not points:
            known = ", ".join(sorted(by_name)) or "none"
            raise BadRequest(f"--plugin {name}: no entry point of that name in {GROUP} (installed: {known})", hint=HINT)
        if len(points) > 1:
            givers = ", ".join(f"{p.distribution} ({p.value})" for p in points)
            raise BadRequest(f"site check {name} is given by two packages: {givers}", hint="uninstall one of them")
    return [_spec(by_name[name][0]) for name in wanted]


def _spec(point: EntryPoint) -> SiteSpec:
    origin = f"entry point {point.value} ({point.distribution} {point.version or '?'})"
    where = f"site check {point.name} ({origin})"
    check = load_object(point.value, where)
    hint = "the entry point must name a gpuenv.sitecheck.Check (docs/verify.md, Site checks)"
    if not isinstance(check, Check):
        raise BadRequest(f"{where} is of type {type(check).__name__}, not a gpuenv.sitecheck.Check", hint=hint)
    if check.name != point.name:
        raise BadRequest(f"{where} declares the name {check.name!r}: the entry point must carry it", hint=hint)
    if not callable(check.run):
        raise BadRequest(f"{where}: run is not callable", hint=hint)
    return declared(_declaration(check), kind="python", origin=origin, target=point.value, where=where)


def _declaration(check: Check) -> dict[str, Any]:
    """A Check's fields as the declaration schema reads them (the same as an executable's header)."""
    timeout = dict(check.timeout) if isinstance(check.timeout, Mapping) else check.timeout
    levels, needs = list(check.levels), list(check.needs)
    return {"name": check.name, "levels": levels, "timeout": timeout, "needs": needs, "about": check.about} | {
        "api": check.api
    }


def load_object(value: str, where: str) -> Any:
    """The object an entry point's "module:attribute.path" names; exit 3 when it cannot be imported."""
    module, _, attribute = value.partition(":")
    try:
        found: Any = import_module(module.strip())
        for part in filter(None, attribute.strip().split(".")):
            found = getattr(found, part)
    except (Exception, SystemExit) as exc:  # the package's own code failed: gpuenv cannot run it
        raise CannotRun(
            f"{where} cannot be loaded: {type(exc).__name__}: {exc}",
            hint="fix the package, or stop enabling the check (--plugin, --all-plugins)",
        ) from None
    return found


def run_python(name: str, target: str, origin: str, ctx: CheckContext) -> CheckResult:
    """Run an entry point's check in this process (the verify worker): an exception it raises is
    its crash, with the traceback; what it returns is read as its answer."""
    check = load_object(target, name)
    work = Path(tempfile.mkdtemp(prefix="gpuenv-site-"))
    gpus = ctx.host.gpus
    context = Context(
        level=ctx.level,  # type: ignore[arg-type]
        device=ctx.device,  # type: ignore[arg-type]
        gpus=tuple(g.index for g in gpus),
        gpu_uuids=tuple(g.uuid or "" for g in gpus),
        work_dir=work,
        limit_s=ctx.limit_s or 0.0,
    )
    try:
        returned = check.run(context)
    except (Exception, SystemExit) as exc:
        import traceback  # off the start-up: only where a check crashed

        tail = "".join(traceback.format_exception(exc))[-4000:]
        summary = f"{name} crashed: {type(exc).__name__}: {exc}"[:300]
        return CheckResult(name, "crash", summary=summary, detail={"origin": origin, "traceback": tail})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = from_python(name, origin, returned, gpus)
    result.detail["origin"] = origin
    return result
