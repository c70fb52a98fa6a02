"""Fixtures for the verify tests: the fake libnvidia-ml.so.1 and libamd_smi.so (compiled here from
C with gcc) and Debian's real libnvidia-ml1 unpacked by tests/infra/prepare.sh."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuenv.verify.pci import TEST_SYSFS_ENV
from tests.conftest import CACHE, require, run_gpuenv

HERE = Path(__file__).resolve().parent
FAKE_NVML = HERE / "fake_nvml"


def compile_fake(source: Path, library: Path) -> Path:
    """One of the fake GPU libraries (C beside its scenarios, sharing fake_gpu.h), warnings as errors."""
    require(shutil.which("gcc") is not None, f"needs gcc to build the fake {library.name}")
    command = ["gcc", "-shared", "-fPIC", "-Wall", "-Werror", "-O1", "-o", str(library), str(source)]
    subprocess.run(command, check=True, timeout=60)
    return library


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the fake libnvidia-ml.so.1, for LD_LIBRARY_PATH."""
    out = tmp_path_factory.mktemp("fake-nvml")
    compile_fake(FAKE_NVML / "fake_nvml.c", out / "libnvidia-ml.so.1")
    return out


FAKE_AMDSMI = HERE / "fake_amdsmi"
AMD_BUS = [f"0000:{0x05 + 0x10 * i:02x}:00.0" for i in range(8)]  # where the fake puts its GPUs


@pytest.fixture(scope="session")
def fake_rocm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ROCm root (for ROCM_PATH) holding the fake lib/libamd_smi.so."""
    root = tmp_path_factory.mktemp("fake-rocm")
    (root / "lib").mkdir()
    compile_fake(FAKE_AMDSMI / "fake_amdsmi.c", root / "lib" / "libamd_smi.so")
    return root


@pytest.fixture(scope="session")
def amd_sysfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PCI bus with eight MI300X (processing accelerators) and an AMD audio function."""
    root = tmp_path_factory.mktemp("sysfs-amd")
    fake_sysfs(root, {bus: ("0x1002", "0x120000") for bus in AMD_BUS} | {"0000:c1:00.1": ("0x1002", "0x040300")})
    return root


def fake_sysfs(root: Path, devices: dict[str, tuple[str, str]]) -> Path:
    for bus, (vendor, klass) in devices.items():
        (root / bus).mkdir(parents=True)
        (root / bus / "vendor").write_text(vendor + "\n")
        (root / bus / "class").write_text(klass + "\n")
    return root


def nvidia_bus(root: Path) -> dict[str, str]:
    """The environment of a node whose PCI bus shows one NVIDIA GPU (a GPU node, whatever NVML says)."""
    sysfs = fake_sysfs(root / "sysfs-nvidia", {"0000:18:00.0": ("0x10de", "0x030200")})
    return {TEST_SYSFS_ENV: str(sysfs)}


def shadow_torch(tmp_path: Path) -> dict[str, str]:
    """An environment in which `import torch` fails, as on a machine without torch."""
    package = tmp_path / "shadow" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), os.environ.get("PYTHONPATH", "")])}


def amd_env(rocm: Path, sysfs: Path, scenario: str, **extra: str) -> dict[str, str]:
    """verify over the fake AMD SMI, with the stand-in load (the fake answers its under-load
    values while the marker exists)."""
    marker = str(rocm / "load-marker")
    return {
        "GPUENV_TEST_FAULT": "nvml:standin",
        "GPUENV_TEST_LOAD_MARKER": marker,
        "FAKE_AMDSMI_LOAD_MARKER": marker,
        "ROCM_PATH": str(rocm),
        "FAKE_AMDSMI_SCENARIO": str(FAKE_AMDSMI / f"{scenario}.scenario"),
        TEST_SYSFS_ENV: str(sysfs),
        "LD_LIBRARY_PATH": "",  # no libnvidia-ml: NVML cannot name the GPUs
        **extra,
    }


@pytest.fixture(scope="session")
def debian_nvml_dir() -> Path:
    """Debian's libnvidia-ml1 (535.x) unpacked, not installed: the kernel driver is not loaded."""
    found = sorted((CACHE / "nvidia" / "libnvidia-ml1" / "root").glob("usr/lib/*/nvidia/current/libnvidia-ml.so.1"))
    require(bool(found), f"no unpacked libnvidia-ml1 under {CACHE}/nvidia (run scripts/test.sh as root)")
    return found[0].parent


def verify_json(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> tuple[int, dict[str, Any], str]:
    """Run the real `gpuenv verify ... --json`; (exit code, report, stderr)."""
    proc = run_gpuenv("verify", *args, "--json", env=env, timeout=timeout)
    try:
        report = json.loads(proc.stdout)
    except ValueError as exc:
        raise AssertionError(
            f"no JSON report (exit {proc.returncode}): {proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        ) from exc
    return proc.returncode, report, proc.stderr


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == name)


def scenario_env(lib_dir: Path, scenario: str) -> dict[str, str]:
    return {"LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_SCENARIO": str(FAKE_NVML / f"{scenario}.scenario")}
