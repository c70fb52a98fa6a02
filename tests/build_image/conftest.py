"""Fixtures for the build-image tests: a real isolated dockerd, a real registry on 127.0.0.1, and
the stand-in base image, each started once per session and stopped by its own PID."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.build_image import services
from tests.conftest import require


@pytest.fixture(scope="session")
def dockerd() -> Iterator[services.Service]:
    require(services.can_run_dockerd(), "needs root and dockerd (apt-get install docker.io) for a real Docker engine")
    daemon = services.start_dockerd()
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="session")
def docker_env(dockerd: services.Service) -> dict[str, str]:
    """The environment that points gpuenv (a subprocess) at the test daemon."""
    return {"DOCKER_HOST": dockerd.address}


@pytest.fixture(scope="session")
def docker_client(dockerd: services.Service) -> Iterator[Any]:
    import docker

    client = docker.DockerClient(base_url=dockerd.address, timeout=600)
    yield client
    client.close()


@pytest.fixture(scope="session")
def standin_image(dockerd: services.Service, bookworm_rootfs_tar: Path) -> str:
    return services.import_standin(dockerd.address, bookworm_rootfs_tar)


@pytest.fixture(scope="session")
def registry() -> Iterator[str]:
    require(
        shutil.which("docker-registry") is not None,
        "needs Debian's docker-registry (apt-get install docker-registry) for a local registry",
    )
    service = services.start_registry()
    try:
        yield service.address
    finally:
        service.stop()
