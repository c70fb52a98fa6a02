"""The options of one verify run on this node, as the engine, the runner and `--passive` take them
(apart from the runner, so that `--passive` does not import the worker's machinery for them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuenv.verify.model import DeviceChoice, Level

if TYPE_CHECKING:  # site checks are loaded only when a run enables them
    from gpuenv.verify.site.spec import SiteSpec


@dataclass(frozen=True)
class SiteOptions:
    """Which site checks a run may use: a checks directory's programs, and entry points by name or all."""

    checks_dir: str | None = None
    plugins: tuple[str, ...] = ()
    all_plugins: bool = False

    def given(self) -> bool:
        return bool(self.checks_dir or self.plugins or self.all_plugins)

    def arguments(self) -> list[str]:
        """The options that name them to a verify on a host (fleet verify, provision)."""
        args = ["--checks-dir", self.checks_dir] if self.checks_dir else []
        for name in self.plugins:
            args += ["--plugin", name]
        return args + (["--all-plugins"] if self.all_plugins else [])


@dataclass(frozen=True)
class VerifyOptions:
    level: Level = "quick"
    checks: tuple[str, ...] = ()
    device: DeviceChoice = "auto"
    expect_gpus: int | None = None
    strict: bool = False
    artifacts_dir: str | None = None
    baseline: str | None = None
    policy: str | None = None
    kb: str | None = None
    timeout: float | None = None  # overrides every check's own limit
    placement: dict[str, Any] | None = None  # a run across nodes (gpuenv.verify.launch.Placement)
    gpus: tuple[int, ...] = ()  # --gpus: only these GPUs (NVML indices, PCI bus order); () for all
    site: tuple[SiteSpec, ...] = ()  # the site checks enabled, loaded (gpuenv.verify.site)


# on_start(check name, its limit in seconds): a check is about to run (before its worker starts)
OnStart = Callable[[str, float], None]
