"""`gpuenv tune power` over the fake NVML library, which keeps every set limit in a log across
processes as the driver does: each way a run can end leaves every GPU at its original limit.

The NLP step runs on the CPU here (`--device cpu`: no GPU for torch on the test machine), which
exercises the stepping, the state file and the restoring; the choice and --apply are driven by a
stand-in workload whose figures follow the limit the fake GPU holds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_gpuenv

ORIGINAL = 700000  # the fake GPUs' limit at start, milliwatts
WAIT_S = 180.0  # for the workload process to import torch on a busy 2-core machine


@pytest.fixture
def node(tmp_path: Path, fake_nvml_dir: Path) -> dict[str, str]:
    """Two fake H100s, their set calls logged in tmp_path, the state file under tmp_path."""
    scenario = tmp_path / "two.scenario"
    scenario.write_text("count=2\nname=NVIDIA H100 80GB HBM3\npower_draw=600000\n")
    return {
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "FAKE_NVML_SCENARIO": str(scenario),
        "FAKE_NVML_POWER_LOG": str(tmp_path / "power.log"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }


def state_file(env: dict[str, str]) -> Path:
    return Path(env["XDG_STATE_HOME"]) / "gpuenv" / "power-state.json"


def set_calls(env: dict[str, str]) -> list[tuple[int, int]]:
    """Every limit set, in order: (GPU, milliwatts)."""
    log = Path(env["FAKE_NVML_POWER_LOG"])
    lines = log.read_text().splitlines() if log.exists() else []
    return [(int(gpu[3:]), int(mw)) for gpu, mw, _pid in (line.split() for line in lines)]


def final_limits(env: dict[str, str]) -> dict[int, int]:
    return dict(set_calls(env))  # the last set per GPU; one never set keeps its original


@pytest.fixture
def start() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start `gpuenv tune power --device cpu ARGS` in the background; killed if a test fails early
    (its workload hangs by design, and dies with it)."""
    started: list[subprocess.Popen[str]] = []

    def run(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuenv", "tune", "power", "--device", "cpu", *args],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        return proc

    yield run
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)


def wait_for_sets(env: dict[str, str], count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(set_calls(env)) < count:
        assert time.monotonic() < deadline, f"no {count} set calls within {WAIT_S} s: {set_calls(env)}"
        time.sleep(0.1)


def workload_processes(parent: int) -> list[int]:
    """The workload processes this gpuenv started (they carry its pid in their environment)."""
    marker = f"GPUENV_TUNE_PARENT={parent}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_full_run_measures_every_cap_and_puts_every_limit_back(node: dict[str, str]) -> None:
    result = run_gpuenv("tune", "power", "--device", "cpu", "--steps", "2", "--json", env=node, timeout=WAIT_S * 2)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set_calls(node) == [(0, 700000), (0, 200000), (0, 700000), (1, 700000), (1, 200000), (1, 700000)]
    assert final_limits(node) == {0: ORIGINAL, 1: ORIGINAL} and not state_file(node).exists()
    assert data["device"] == "cpu" and "CPU" in data["note"] and not data["applied"]
    for gpu in data["gpus"]:
        assert [c["limit_w"] for c in gpu["caps"]] == [700, 200] and gpu["final_w"] == 700
        assert all(c["tokens_per_s"] > 0 and c["tokens_per_j"] is None for c in gpu["caps"])  # CPU tokens
        # the GPU's own draw, from its energy counter over the timed steps: min(600 W draw, the cap), the
        # joules divided by the time between the counter's two reads (the meter's), not the steps' timer
        assert [c["watts"] for c in gpu["caps"]] == [pytest.approx(600, rel=0.05), pytest.approx(200, rel=0.05)]
        assert gpu["chosen_w"] is None


def test_sigterm_mid_run_puts_every_limit_back(node: dict[str, str], start: Callable[..., Any]) -> None:
    proc = start({**node, "GPUENV_TEST_FAULT": "tune-power:hang:rank1"}, "--steps", "3")
    wait_for_sets(node, 2)  # GPU 0 measured at 700 W, now hanging at 450 W
    assert json.loads(state_file(node).read_text())["gpus"][0]["original_mw"] == ORIGINAL
    for args in (("--restore",), ("--device", "cpu")):  # neither fights the run in progress
        busy = run_gpuenv("tune", "power", *args, env=node)
        assert busy.returncode == 2 and "still running" in busy.stderr, busy.stderr
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 3, stderr
    assert "interrupted by SIGTERM; every GPU's original power limit is back" in stderr
    assert set_calls(node)[-1] == (0, ORIGINAL) and final_limits(node) == {0: ORIGINAL}
    assert not state_file(node).exists() and not workload_processes(proc.pid)


def test_sigkill_leaves_the_state_file_which_blocks_a_new_run_until_restore(
    node: dict[str, str], start: Callable[..., Any]
) -> None:
    proc = start({**node, "GPUENV_TEST_FAULT": "tune-power:hang:rank1"}, "--steps", "3")
    wait_for_sets(node, 2)
    proc.kill()
    proc.communicate(timeout=60)
    assert final_limits(node) == {0: 450000}  # changed, as after a power loss in the middle
    deadline = time.monotonic() + 10
    while workload_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not workload_processes(proc.pid)  # the workload died with gpuenv (PR_SET_PDEATHSIG)
    refused = run_gpuenv("tune", "power", "--device", "cpu", env=node)
    assert refused.returncode == 2 and "--restore" in refused.stderr, refused.stderr
    assert len(set_calls(node)) == 2  # the refused run changed nothing
    restored = run_gpuenv("tune", "power", "--restore", "--json", env=node)
    assert restored.returncode == 0, restored.stderr
    assert [(g["index"], g["original_w"]) for g in json.loads(restored.stdout)["restored"]] == [(0, 700), (1, 700)]
    assert final_limits(node) == {0: ORIGINAL} and not state_file(node).exists()
    again = run_gpuenv("tune", "power", "--restore", env=node)
    assert again.returncode == 0 and "nothing to restore" in again.stdout


def test_a_crashing_workload_is_exit_1_with_every_limit_back(node: dict[str, str]) -> None:
    env = {**node, "GPUENV_TEST_FAULT": "tune-power:abort:rank1"}
    result = run_gpuenv("tune", "power", "--device", "cpu", "--steps", "3", env=env, timeout=WAIT_S * 2)
    assert result.returncode == 1, result.stderr
    assert "GPU 0 at 450 W crashed (killed by SIGABRT)" in result.stderr
    assert final_limits(node) == {0: ORIGINAL} and not state_file(node).exists()


def test_without_permission_nothing_changes(node: dict[str, str], tmp_path: Path) -> None:
    scenario = Path(node["FAKE_NVML_SCENARIO"])
    scenario.write_text(scenario.read_text() + "power_set_denied=1\n")
    result = run_gpuenv("tune", "power", "--device", "cpu", env=node, timeout=WAIT_S * 2)
    assert result.returncode == 2 and "needs root" in result.stderr, result.stderr
    assert set_calls(node) == [] and not state_file(node).exists()


STAND_IN = """
import json, sys
from gpuenv.adapters import nvml
from gpuenv.power import service

class SaturatingGpu:
    '''A GPU whose throughput saturates at high power: figures follow the limit the fake GPU holds.'''
    def start(self, device):
        return {"device": "cuda", "cuda_devices": 2}
    def measure(self, request, timeout):
        watts = min(nvml.power_limit_mw(request["nvml_index"]) / 1000, 600)
        tokens = {600: 1000, 575: 990, 450: 960, 325: 850, 200: 600}[watts]
        return {"tokens": tokens, "seconds": 1.0, "tokens_per_s": tokens, "wall_s": 1.0,
                "energy_j": watts, "energy_source": "stand-in"}
    def close(self):
        pass

request = service.TuneRequest(device="cuda", apply=True, max_loss=float(sys.argv[1]))
print(json.dumps(service.tune(request, workload=SaturatingGpu()).to_dict()))
"""


def test_apply_keeps_the_chosen_cap_until_restore(node: dict[str, str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", STAND_IN, "0.05"], env={**os.environ, **node}, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["applied"] and [g["chosen_w"] for g in data["gpus"]] == [450, 450]
    assert [g["final_w"] for g in data["gpus"]] == [450, 450]
    assert final_limits(node) == {0: 450000, 1: 450000}
    kept = json.loads(state_file(node).read_text())
    assert kept["phase"] == "applied" and [g["applied_mw"] for g in kept["gpus"]] == [450000, 450000]
    refused = run_gpuenv("tune", "power", "--device", "cpu", env=node)
    assert refused.returncode == 2 and "kept by --apply" in refused.stderr
    assert run_gpuenv("tune", "power", "--restore", env=node).returncode == 0
    assert final_limits(node) == {0: ORIGINAL, 1: ORIGINAL} and not state_file(node).exists()


def test_apply_is_refused_with_cpu_figures(node: dict[str, str]) -> None:
    result = run_gpuenv("tune", "power", "--device", "cpu", "--apply", env=node)
    assert result.returncode == 2 and "--apply" in result.stderr and set_calls(node) == []
