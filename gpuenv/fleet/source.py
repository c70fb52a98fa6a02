"""Where a fleet's reports are (FleetSource), and the fleet's services for the commands that take `--fleet`.

resolve, build-image and provision import this module at start-up; the services behind `--fleet` read
reports (msgspec, SQLite, worker processes: some 75 modules, 40 % of `resolve`'s own start-up, measured
with -X importtime), so they are named "module:function" and imported when first called, as the CLI's
commands and the output renderers are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only annotations: the stack and request modules are resolve's, loaded by then
    from gpuenv.resolve.request import Request
    from gpuenv.stack import Stack

DEFAULT_MAX_AGE_DAYS = 30.0  # a host whose newest report is older says little about what it runs now
SERVICES = {
    "resolve": "gpuenv.fleet.fleet_resolve:resolve_for_fleet",
    "check": "gpuenv.fleet.compat:check_rollout",
}


@dataclass(frozen=True)
class FleetSource:
    """Where the fleet's reports are: folders or files of reports, or the GPU history; never both."""

    paths: tuple[Path, ...] = ()
    history: Path | None = None
    max_age_days: float = DEFAULT_MAX_AGE_DAYS
    clock_skew_s: float | None = None  # a report dated further ahead is flagged; None: fleet report's default

    def named(self) -> str:
        return f"--fleet-history {self.history}" if self.history else ", ".join(map(str, self.paths))


@dataclass(frozen=True)
class OnHost:
    """A stack installed on the host itself (provision, pip), not brought in an image: judged against the host's
    OS and Python as well (gpuenv.fleet.compat_rules)."""

    os: str | None = None  # the OS it was resolved for; None: none (a lockfile, provision resolving on each host)
    python: str | None = None  # the Python it needs; None: any its torch has wheels for and the host's OS gives
    only_os: bool = False  # installed on that OS alone (provision --os refuses a host of another)
    by_pip: bool = False  # pip into the host's own Python (a lockfile): nothing installs the Python it needs

    @classmethod
    def resolved(cls, os: str | None, python: str | None) -> OnHost:
        """As provision installs the stack options: resolved on each host's own OS, or with --os on that OS alone."""
        return cls(os, python, only_os=os is not None)


def resolve_for_fleet(kb_path: Path | None, request: Request, source: FleetSource) -> Stack:
    """The newest stack every host of the fleet runs (gpuenv.fleet.fleet_resolve)."""
    stack: Stack = _service("resolve")(kb_path, request, source)
    return stack


def check_rollout(
    stack: Stack,
    source: FleetSource,
    *,
    kb_path: Path | None,
    strict: bool,
    on_warning: Callable[[str], None],
    on_host: OnHost | None = None,
) -> None:
    """Warn of the hosts that cannot run the stack, or refuse with strict (gpuenv.fleet.compat)."""
    _service("check")(stack, source, kb_path=kb_path, strict=strict, on_warning=on_warning, on_host=on_host)


def _service(name: str) -> Callable[..., Any]:
    module, function = SERVICES[name].split(":")
    found: Callable[..., Any] = getattr(import_module(module), function)
    return found
