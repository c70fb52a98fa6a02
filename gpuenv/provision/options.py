"""What a user chose for provisioning beyond the stack: the venv, wheels, the driver, verify, reports."""

from __future__ import annotations

from dataclasses import dataclass

from gpuenv.types import DeviceChoice, Level


@dataclass(frozen=True)
class ProvisionOptions:
    venv: str = "/opt/gpuenv/venv"
    wheelhouse: str | None = None  # a directory on the controller (absolute)
    index_url: str | None = None  # a mirror of the stack's wheel index
    gpuenv_wheel: str | None = None  # gpuenv's own wheel on the controller (absolute)
    torch_only: bool = False
    driver: bool = True
    driver_branch: str | None = None  # "580"; default: the stack's
    driver_source: str = "auto"
    kernel_modules: str = "auto"
    allow_secure_boot: bool = False
    reboot: bool = True
    container_toolkit: bool = False
    verify: bool = True
    verify_level: Level = "quick"
    verify_device: DeviceChoice = "auto"
    reports_dir: str = "reports"  # on the controller (absolute)
    min_free_gb: int = 10
    site_checks_dir: str | None = None  # a checks directory on the controller (absolute)
    site_checks_files: tuple[str, ...] = ()  # the files it ships
    site_checks_wheels: tuple[str, ...] = ()  # site check packages on the controller (absolute)
