"""The energy meter the workload checks read around their timed steps, over the fake NVML: the
total-energy counter where the GPU has one, and an honest "not measured" where it has neither
the counter nor a power reading."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.verify.conftest import FAKE_NVML

MEASURE = (
    "import json, time; from gpuenv.power.energy import EnergyMeter\n"
    "with EnergyMeter(3) as meter: time.sleep(0.2)\n"
    "print(json.dumps([meter.joules, meter.source, meter.seconds]))"
)


def measure(fake_nvml_dir: Path, scenario: Path) -> tuple[float | None, str, float]:
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_SCENARIO": str(scenario)}
    proc = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    joules, source, seconds = json.loads(proc.stdout)
    return joules, source, seconds


def test_the_counter_is_read_around_the_block(fake_nvml_dir: Path) -> None:
    joules, source, seconds = measure(fake_nvml_dir, FAKE_NVML / "healthy-8xh100.scenario")
    assert source == "NVML total-energy counter" and joules is not None and seconds >= 0.2
    # the fake's counter grows at its 450 W draw; the meter's own seconds are what the joules cover, so
    # joules / seconds is that draw, however late the block's own timer would have started or stopped
    assert joules / seconds == pytest.approx(450, rel=0.02)


def test_without_counter_or_power_nothing_is_made_up(fake_nvml_dir: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "no-energy.scenario"
    scenario.write_text(
        (FAKE_NVML / "healthy-8xh100.scenario").read_text()
        + "unsupported=nvmlDeviceGetTotalEnergyConsumption,nvmlDeviceGetPowerUsage\n"
    )
    joules, source, _ = measure(fake_nvml_dir, scenario)
    assert joules is None and source.startswith("neither")
