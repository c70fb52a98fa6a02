"""`gpuenv tune power` on AMD Instinct GPUs, through AMD SMI's power cap: the real `amdsmi`
bindings over the fake libamd_smi.so, which keeps every cap set in a log across processes (as the
fake NVML keeps its limits). The NLP step runs on the CPU (the mechanism: stepping, the state
file, the restore); --apply is driven by a stand-in workload whose figures follow the fake cap,
and verify then says the cap it applied is info, not a warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuenv.platforms.rocm.node import FLOOR_SHARE as AMD_FLOOR_SHARE
from gpuenv.verify.pci import TEST_SYSFS_ENV
from tests.conftest import run_gpuenv
from tests.verify.conftest import check, verify_json

ORIGINAL = 750_000_000  # the fake MI300X's cap and default, microwatts
WAIT_S = 180.0


@pytest.fixture
def node(tmp_path: Path, fake_rocm: Path, amd_sysfs: Path) -> dict[str, str]:
    """Two fake MI300X drawing 600 W, no NVML, their cap sets logged in tmp_path."""
    scenario = tmp_path / "two.scenario"
    scenario.write_text("count=2\nname=AMD Instinct MI300X\npower_w=600\n")
    return {
        "ROCM_PATH": str(fake_rocm),
        "FAKE_AMDSMI_SCENARIO": str(scenario),
        "FAKE_AMDSMI_POWER_LOG": str(tmp_path / "power.log"),
        TEST_SYSFS_ENV: str(amd_sysfs),
        "LD_LIBRARY_PATH": "",  # no libnvidia-ml: NVML cannot be used
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "GPUENV_POWER_RECORD": str(tmp_path / "power-applied.json"),
    }


def set_calls(env: dict[str, str]) -> list[tuple[int, int]]:
    """Every cap set, in order: (GPU, watts)."""
    log = Path(env["FAKE_AMDSMI_POWER_LOG"])
    lines = log.read_text().splitlines() if log.exists() else []
    return [(int(gpu[3:]), int(uw) // 1_000_000) for gpu, uw, _pid in (line.split() for line in lines)]


def state_file(env: dict[str, str]) -> Path:
    return Path(env["XDG_STATE_HOME"]) / "gpuenv" / "power-state.json"


def add_to_scenario(env: dict[str, str], text: str) -> None:
    scenario = Path(env["FAKE_AMDSMI_SCENARIO"])
    scenario.write_text(scenario.read_text() + text)


@pytest.mark.torch  # the NLP step runs in torch
def test_a_full_run_steps_the_amd_power_cap_and_puts_it_back(node: dict[str, str]) -> None:
    result = run_gpuenv("tune", "power", "--device", "cpu", "--steps", "2", "--json", env=node, timeout=WAIT_S * 2)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    floor = round(750 * AMD_FLOOR_SHARE)  # AMD SMI names no floor for MI300X (min_power_cap 0)
    assert set_calls(node) == [(0, 750), (0, floor), (0, 750), (1, 750), (1, floor), (1, 750)]
    assert not state_file(node).exists() and not data["applied"]
    for gpu in data["gpus"]:
        assert gpu["name"] == "AMD Instinct MI300X" and gpu["min_w"] == floor and gpu["final_w"] == 750
        assert [c["limit_w"] for c in gpu["caps"]] == [750, floor]
        # the GPU's joules from AMD SMI's energy accumulator: min(600 W draw, the cap)
        assert [c["energy_source"] for c in gpu["caps"]] == ["AMD SMI energy accumulator"] * 2
        assert [c["watts"] for c in gpu["caps"]] == [pytest.approx(600, rel=0.05), pytest.approx(floor, rel=0.05)]


@pytest.mark.torch  # the NLP step runs in torch
def test_without_permission_nothing_changes(node: dict[str, str]) -> None:
    add_to_scenario(node, "power_set_denied=1\n")
    result = run_gpuenv("tune", "power", "--device", "cpu", env=node, timeout=WAIT_S * 2)
    assert result.returncode == 2 and "NO_PERMISSION: changing a power limit needs root" in result.stderr
    assert set_calls(node) == [] and not state_file(node).exists()


@pytest.mark.torch  # the NLP step runs in torch
def test_a_gpu_that_cannot_be_capped_is_exit_3_with_the_reason(node: dict[str, str]) -> None:
    add_to_scenario(node, "unsupported=amdsmi_set_power_cap\n")
    result = run_gpuenv("tune", "power", "--device", "cpu", env=node, timeout=WAIT_S * 2)
    assert result.returncode == 3, result.stderr
    assert "NOT_SUPPORTED: this GPU or driver does not let AMD SMI set it" in result.stderr
    assert "Traceback" not in result.stderr and not state_file(node).exists()


def test_an_amd_node_without_amd_smi_is_exit_3_with_its_reason_alone(node: dict[str, str], tmp_path: Path) -> None:
    result = run_gpuenv("tune", "power", "--device", "cpu", env={**node, "ROCM_PATH": str(tmp_path)})
    assert result.returncode == 3 and "AMD SMI cannot be used here" in result.stderr, result.stderr
    assert "libamd_smi.so" in result.stderr and "Traceback" not in result.stderr
    assert "NVML" not in result.stderr and "gpuenv[verify]" not in result.stderr  # never the other vendor's


def test_a_driver_that_is_not_loaded_is_amd_smis_reason(node: dict[str, str]) -> None:
    add_to_scenario(node, "init_error=34\n")
    result = run_gpuenv("tune", "power", "--device", "cpu", env=node)
    assert result.returncode == 3 and "AMD SMI cannot be used here: driver-not-loaded" in result.stderr


STAND_IN = """
import json, sys
from gpuenv.adapters import amdsmi
from gpuenv.power import service

class SaturatingGpu:
    '''An MI300X whose throughput saturates at high power: figures follow the cap the fake GPU holds.'''
    def start(self, device):
        return {"device": "cuda", "cuda_devices": 2}
    def measure(self, request, timeout):
        assert request["smi"] == "amdsmi"
        watts = min(amdsmi.power_limit_mw(request["nvml_index"]) / 1000, 600)
        tokens = 1000 * (watts / 600) ** 0.25
        return {"tokens": round(tokens), "seconds": 1.0, "tokens_per_s": tokens, "wall_s": 1.0,
                "energy_j": watts, "energy_source": "stand-in"}
    def close(self):
        pass

request = service.TuneRequest(device="cuda", apply=True, steps=3, max_loss=0.05)
print(json.dumps(service.tune(request, workload=SaturatingGpu()).to_dict()))
"""


@pytest.mark.torch  # the NLP step runs in torch
def test_an_applied_cap_is_recorded_and_verify_says_info(node: dict[str, str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", STAND_IN], env={**os.environ, **node}, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    # caps 750, 562, 375: 562 W gives the most tokens per joule within 5 % of the peak
    assert data["applied"] and [g["chosen_w"] for g in data["gpus"]] == [562, 562]
    assert set_calls(node)[-2:] == [(0, 562), (1, 562)]
    recorded = json.loads(Path(node["GPUENV_POWER_RECORD"]).read_text())["gpus"]
    assert [(g["index"], g["applied_mw"]) for g in recorded] == [(0, 562000), (1, 562000)]
    assert recorded[0]["uuid"] == "00ff74a1-0000-1000-80c6-000000000000"  # AMD SMI's UUID: verify matches by it

    code, report, _ = verify_json("--check", "nvml", "--passive", env=node)
    findings = check(report, "nvml")["findings"]
    applied = [f for f in findings if f.get("code") == "nvml.power-cap-applied"]
    assert [f["severity"] for f in applied] == ["info", "info"], findings
    assert "applied by gpuenv tune power" in applied[0]["message"]
    assert not [f for f in findings if f["severity"] != "info"] and code == 0, findings  # no power_capped warning

    restored = run_gpuenv("tune", "power", "--restore", "--json", env=node)
    assert restored.returncode == 0, restored.stderr
    assert set_calls(node)[-2:] == [(0, 750), (1, 750)] and not Path(node["GPUENV_POWER_RECORD"]).exists()
    _code, report, _ = verify_json("--check", "nvml", "--passive", env=node)
    assert not [f for f in check(report, "nvml")["findings"] if f.get("code", "").startswith("nvml.power")]
