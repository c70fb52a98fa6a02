"""The power tests use the verify tests' fake libnvidia-ml.so.1 (compiled once per session)."""

from __future__ import annotations

from tests.verify.conftest import fake_nvml_dir as fake_nvml_dir
