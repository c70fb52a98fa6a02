"""The power tests use the verify tests' fake libnvidia-ml.so.1 and fake libamd_smi.so (each
compiled once per session), with AMD GPUs on a stand-in PCI bus."""

from __future__ import annotations

from tests.verify.conftest import fake_nvml_dir as fake_nvml_dir
from tests.verify.test_amdsmi import amd_sysfs as amd_sysfs
from tests.verify.test_amdsmi import fake_rocm as fake_rocm
