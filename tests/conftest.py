"""Shared test plumbing.

`require(component, reason)` is how an integration test says it needs something outside Python:
on a developer's machine that lacks it the test is skipped with the reason; under CI=true a
missing component is a failure, never a skip.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ("tests.provision.fixtures",)  # SSH test hosts, provisioned once per session

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("GPUENV_TEST_CACHE", "/var/cache/gpuenv-test"))
SUITE_VARIABLES = ("GPUENV_TEST_", "GPUENV_UPDATE_GOLDEN")  # the suite's own, not gpuenv settings
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Fixtures that start real services (root: dockerd, a registry, SSH hosts), need the cached rootfs,
# wheelhouse or Debian's libnvidia-ml, or compile the fake one and run the whole CLI over it:
# a test using one is an integration test (nox -s integration).
INTEGRATION_FIXTURES = frozenset(
    {"dockerd", "docker_env", "docker_client", "standin_image", "registry", "ssh_hosts", "provisioned"}
    | {"bookworm_rootfs_tar", "wheelhouse", "fake_nvml_dir", "debian_nvml_dir", "slurm"}
)


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked docker, ssh or slurm, or using a service fixture, are marked integration."""
    for item in items:
        uses = set(getattr(item, "fixturenames", ()))
        if any(item.get_closest_marker(m) for m in ("docker", "ssh", "slurm")) or uses & INTEGRATION_FIXTURES:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True, scope="session")
def deaf_to_the_users_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite ignores the settings of whoever runs it: their GPUENV_* variables and config file,
    and leaves their state and cache alone (the GPU history fleet commands record, the wheel of gpuenv
    build-image and provision copy, go to temporary folders).

    Every gpuenv the tests start inherits this. A test that exercises the file passes `--config FILE`
    (which beats GPUENV_NO_CONFIG), or GPUENV_NO_CONFIG="" in its environment to try the lookup.
    """
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("GPUENV_") and not k.startswith(SUITE_VARIABLES)]:
        del os.environ[key]
    os.environ["GPUENV_NO_CONFIG"] = "1"
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("xdg-state"))
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))  # gpuenv's own wheel
    yield
    os.environ.clear()
    os.environ.update(saved)


def require(available: bool, reason: str) -> None:
    """Skip (on a user's machine) or fail (under CI=true) when a component is missing."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"missing under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def free_port(address: str = "127.0.0.1") -> int:
    """A port nothing listens on, picked below the kernel's ephemeral range: a port from that range
    can be taken by any outgoing connection between this probe and the daemon's own bind."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for port in random.sample(range(max(1025, low - 12000), low), 200):
        with socket.socket() as probe:
            try:
                probe.bind((address, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on {address} below {low}")


def run_gpuenv(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "gpuenv", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def gpuenv_main(*args: str) -> int:
    """Run the CLI's main in this process (its output reaches capsys); its exit code."""
    from gpuenv.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return int(exit_info.value.code or 0)


@pytest.fixture(scope="session")
def bookworm_rootfs_tar() -> Path:
    """The cached Debian bookworm rootfs tarball made by tests/infra/prepare.sh."""
    tar = CACHE / "rootfs" / "bookworm.tar"
    require(tar.is_file(), f"no cached rootfs at {tar} (run scripts/test.sh as root to make it)")
    return tar


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    """The cached wheelhouse (torch 2.13.0 CPU, numpy) made by tests/infra/prepare.sh."""
    path = CACHE / "wheelhouse"
    require(any(path.glob("torch-2.13.0*.whl")), f"no cached wheelhouse at {path} (run scripts/test.sh)")
    return path
