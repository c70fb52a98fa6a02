"""Fixtures for the hardening tests: the fake NVML of the verify tests, and root-only helpers."""

from __future__ import annotations

import os

import pytest

from tests.conftest import require
from tests.verify.conftest import debian_nvml_dir, fake_nvml_dir  # noqa: F401  (fixtures used here too)


@pytest.fixture
def as_root() -> None:
    require(os.geteuid() == 0, "needs root (mknod, chown)")
