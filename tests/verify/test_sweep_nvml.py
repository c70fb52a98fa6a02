"""The sweep over NVML: every call the nvml check makes (handle and count included) x every error
class NVML's table gives it, on one GPU of four, in --passive, in the check (idle and under load)
and under load only, through the real pynvml bindings over the fake libnvidia-ml.so.1 loaded into
this process (hundreds of cases in seconds); a sample of the same through the CLI."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpuenv.adapters.nvml_errors import LOST, NORMAL, classify
from tests.verify import sweep
from tests.verify.conftest import check, verify_json

BASE = f"count={sweep.GPUS}\n"
NODE = frozenset(
    {
        "nvmlSystemGetDriverVersion",
        "nvmlSystemGetCudaDriverVersion",
        "nvmlDeviceGetCount",
        "nvmlEventSetCreate",
        "nvmlEventSetWait_v2",
    }
)
ONLY_UNDER_LOAD = frozenset({"nvmlDeviceGetViolationStatus"})
MADE_UNDER_LOAD = frozenset(
    {
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetViolationStatus",
    }
)
FAILURES = ("UNKNOWN", "NO_PERMISSION", "TIMEOUT", "LIB_RM_VERSION_MISMATCH")
VALUES = {n.removeprefix("NVML_ERROR_"): getattr(pynvml, n) for n in dir(pynvml) if n.startswith("NVML_ERROR_")}
CASES = sweep.cases(
    NORMAL,
    VALUES,
    classify,
    lost=LOST,
    failures=FAILURES,
    node=NODE,
    only_under_load=ONLY_UNDER_LOAD,
    made_under_load=MADE_UNDER_LOAD,
)


@pytest.fixture(scope="module")
def nvml_here(fake_nvml_dir: Path) -> Iterator[ctypes.CDLL]:
    """The fake libnvidia-ml.so.1 as the bindings' library in this process (put back after)."""
    saved = pynvml.nvmlLib
    pynvml.nvmlLib = ctypes.CDLL(str(fake_nvml_dir / "libnvidia-ml.so.1"))
    pynvml._nvmlGetFunctionPointer_cache.clear()
    try:
        yield pynvml.nvmlLib
    finally:
        pynvml.nvmlLib = saved
        pynvml._nvmlGetFunctionPointer_cache.clear()


@pytest.fixture
def scenario(nvml_here: ctypes.CDLL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Writes a scenario and points the fake at it; returns the writer."""
    assert pynvml.nvmlLib is nvml_here  # nothing else in this process swapped the library meanwhile
    path = tmp_path / "case.scenario"
    monkeypatch.setenv("FAKE_NVML_SCENARIO", str(path))
    monkeypatch.setenv("FAKE_NVML_LOAD_MARKER", str(tmp_path / "load-marker"))
    monkeypatch.setenv("GPUENV_POWER_RECORD", str(tmp_path / "no-record.json"))
    monkeypatch.setenv("GPUENV_TEST_SYSFS_PCI", str(tmp_path / "no-sysfs"))
    return path.write_text


@pytest.mark.parametrize("mode", sweep.MODES)
def test_the_healthy_control_is_certified_in_every_mode(scenario: Any, tmp_path: Path, mode: str) -> None:
    scenario(BASE)
    result = sweep.run_check(mode, tmp_path)
    assert result.status == "pass", sweep.problems(result)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_call_and_error_class(scenario: Any, tmp_path: Path, case: sweep.Case) -> None:
    scenario(case.scenario(BASE))
    sweep.assert_judged(case, sweep.run_check(case.mode, tmp_path))


def test_the_table_names_every_call_a_run_makes_and_the_sweep_covers_them(
    scenario: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "trace"
    monkeypatch.setenv("FAKE_NVML_TRACE", str(trace))
    scenario(BASE + "xid=gpu1:13\n")  # an event, so the wait answers one before its "no event"
    sweep.run_check("check", tmp_path)
    assert sweep.calls_traced(trace) == sweep.with_names(NORMAL)
    assert sweep.calls_traced(trace, "load") == sweep.with_names(MADE_UNDER_LOAD)
    trace.unlink()
    sweep.run_check("passive", tmp_path)
    assert sweep.calls_traced(trace) == sweep.with_names(NORMAL) - sweep.with_names(ONLY_UNDER_LOAD)
    assert len(CASES) > 300


CLI_SAMPLE = [
    ("gpu3.errors=nvmlDeviceGetHandleByIndex:15", (), "fail", "nvmlDeviceGetHandleByIndex"),
    ("gpu3.errors=nvmlDeviceGetTotalEccErrors:16", ("--passive",), "fail", "RESET_REQUIRED"),
    ("gpu3.errors=nvmlDeviceGetRemappedRows:999", ("--passive",), "warn", "UNKNOWN to nvmlDeviceGetRemappedRows"),
    ("gpu3.errors_load=nvmlDeviceGetClockInfo:11", (), "fail", "IRQ_ISSUE"),
    ("node_errors=nvmlDeviceGetCount:15", (), "fail", "nvmlDeviceGetCount"),
    ("gpu3.errors=nvmlDeviceGetSerial:3", ("--passive",), "pass", None),
    # the engine's XID watch, in the probe process that holds it for the whole run
    ("node_errors=nvmlEventSetWait_v2:999", (), "warn", "nvmlEventSetWait_v2 answered UNKNOWN"),
    ("gpu3.errors=nvmlDeviceRegisterEvents:15", (), "fail", "XID events not watched on GPU 3"),
]


@pytest.mark.parametrize(("fault", "args", "status", "said"), CLI_SAMPLE)
def test_a_sample_through_the_cli(
    fake_nvml_dir: Path, tmp_path: Path, fault: str, args: tuple[str, ...], status: str, said: str | None
) -> None:
    path = tmp_path / "case.scenario"
    path.write_text(f"count=8\n{fault}\n")
    marker = str(tmp_path / "load-marker")
    env = {
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "FAKE_NVML_SCENARIO": str(path),
        "GPUENV_TEST_FAULT": "nvml:standin",
        "GPUENV_TEST_LOAD_MARKER": marker,
        "FAKE_NVML_LOAD_MARKER": marker,
        "GPUENV_POWER_RECORD": str(tmp_path / "no-record.json"),
    }
    code, report, _ = verify_json("--check", "nvml", "--expect-gpus", "8", *args, env=env)
    result = check(report, "nvml")
    assert result["status"] == status and code == {"pass": 0, "warn": 0, "fail": 1}[status], result["summary"]
    if said:
        assert any(said in f["message"] for f in result["findings"]), result["findings"]
