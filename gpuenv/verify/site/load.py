"""The site checks a run enables: the programs of its checks directory and the entry points named
(or all), each name given once."""

from __future__ import annotations

from pathlib import Path

from gpuenv.errors import BadRequest
from gpuenv.verify.options import SiteOptions
from gpuenv.verify.site import plugins, programs
from gpuenv.verify.site.spec import SiteSpec


def site_checks(options: SiteOptions) -> tuple[SiteSpec, ...]:
    """Every enabled site check, declared; exit 2 when two give the same name."""
    found = [
        *(programs.discover(Path(options.checks_dir)) if options.checks_dir else []),
        *(plugins.load(options.plugins, every=options.all_plugins) if options.plugins or options.all_plugins else []),
    ]
    seen: dict[str, SiteSpec] = {}
    for spec in found:
        if spec.name in seen:
            raise BadRequest(
                f"two site checks are named {spec.name}: {seen[spec.name].origin} and {spec.origin}",
                hint="rename one of them (each check's name is its own)",
            )
        seen[spec.name] = spec
    return tuple(found)
