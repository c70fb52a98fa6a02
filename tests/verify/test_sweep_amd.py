"""The sweep over AMD SMI: every call the nvml check makes on AMD GPUs (the handles included) x
every error class AMD SMI's table gives it, on one GPU of four, in --passive, in the check (idle
and under load) and under load only, through the real amdsmi bindings over the fake libamd_smi.so
loaded into this process; a sample of the same through the CLI."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuenv.adapters.amdsmi_errors import CODES, LOST, NORMAL, classify
from tests.verify import sweep
from tests.verify.conftest import AMD_BUS, amd_env, check, fake_sysfs, verify_json

BASE = f"count={sweep.GPUS}\nload_ppt=1\ngfx_clk_load=1900\n"  # busy MI300X run at their power cap
NODE = frozenset({"amdsmi_get_processor_handles"})
FIRST_GPU = frozenset({"amdsmi_get_gpu_driver_info"})  # the node's driver, as GPU 0 reports it
ONLY_UNDER_LOAD = frozenset({"amdsmi_get_gpu_activity"})
MADE_UNDER_LOAD = frozenset(
    {
        "amdsmi_get_processor_handles",
        "amdsmi_get_violation_status",
        "amdsmi_get_gpu_activity",
        "amdsmi_get_clock_info",
        "amdsmi_get_temp_metric",
        "amdsmi_get_power_info",
    }
)
FAILURES = ("UNKNOWN_ERROR", "NO_PERM", "TIMEOUT", "BUSY")
VALUES = {name: value for value, name in CODES.items()}
CASES = sweep.cases(
    NORMAL,
    VALUES,
    classify,
    lost=LOST,
    failures=FAILURES,
    node=NODE | FIRST_GPU,
    only_under_load=ONLY_UNDER_LOAD,
    made_under_load=MADE_UNDER_LOAD,
)


def scenario_of(case: sweep.Case) -> str:
    """The case's scenario; the driver's call is asked of GPU 0 alone, so it fails there."""
    text = case.scenario(BASE)
    return text.replace("node_errors", "gpu0.errors") if case.call in FIRST_GPU else text


def purge_amdsmi() -> None:
    for name in [m for m in sys.modules if m == "amdsmi" or m.startswith("amdsmi.")]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def amdsmi_here(fake_rocm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The amdsmi bindings imported in this process over the fake libamd_smi.so (they bind it at
    import, from ROCM_PATH; undone after); yields a PCI bus with the fake's first four GPUs."""
    saved = os.environ.get("ROCM_PATH")
    sysfs = fake_sysfs(tmp_path_factory.mktemp("sweep-sysfs"), {b: ("0x1002", "0x120000") for b in AMD_BUS[:4]})
    os.environ["ROCM_PATH"] = str(fake_rocm)
    purge_amdsmi()
    import amdsmi  # noqa: F401 (binds the fake library now, while ROCM_PATH names it)

    try:
        yield sysfs
    finally:
        purge_amdsmi()
        if saved is None:
            os.environ.pop("ROCM_PATH", None)
        else:
            os.environ["ROCM_PATH"] = saved


@pytest.fixture
def scenario(amdsmi_here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    path = tmp_path / "case.scenario"
    monkeypatch.setenv("GPUENV_TEST_SYSFS_PCI", str(amdsmi_here))
    monkeypatch.setenv("FAKE_AMDSMI_SCENARIO", str(path))
    monkeypatch.setenv("FAKE_AMDSMI_LOAD_MARKER", str(tmp_path / "load-marker"))
    monkeypatch.setenv("GPUENV_POWER_RECORD", str(tmp_path / "no-record.json"))
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    return path.write_text


@pytest.mark.parametrize("mode", sweep.MODES)
def test_the_healthy_control_is_certified_in_every_mode(scenario: Any, tmp_path: Path, mode: str) -> None:
    scenario(BASE)
    result = sweep.run_check(mode, tmp_path)
    assert result.status == "pass" and result.metrics["smi"] == "amdsmi", sweep.problems(result)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_call_and_error_class(scenario: Any, tmp_path: Path, case: sweep.Case) -> None:
    scenario(scenario_of(case))
    sweep.assert_judged(case, sweep.run_check(case.mode, tmp_path))


def test_the_table_names_every_call_a_run_makes_and_the_sweep_covers_them(
    scenario: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "trace"
    monkeypatch.setenv("FAKE_AMDSMI_TRACE", str(trace))
    scenario(BASE)
    sweep.run_check("check", tmp_path)
    assert sweep.calls_traced(trace) == set(NORMAL)
    assert sweep.calls_traced(trace, "load") == MADE_UNDER_LOAD
    trace.unlink()
    sweep.run_check("passive", tmp_path)
    assert sweep.calls_traced(trace) == set(NORMAL) - ONLY_UNDER_LOAD
    assert len(CASES) > 150


CLI_SAMPLE = [
    ("gpu3.lost=1", (), "fail", "lost: AMD SMI answered IO"),
    ("gpu3.errors=amdsmi_get_gpu_total_ecc_count:54", ("--passive",), "fail", "AMDGPU_RESTART_ERR"),
    ("gpu3.errors=amdsmi_get_gpu_bad_page_info:10", ("--passive",), "warn", "NO_PERM to amdsmi_get_gpu_bad_page_info"),
    ("gpu3.errors_load=amdsmi_get_clock_info:6", (), "fail", "DRM_ERROR"),
    ("gpu3.errors=amdsmi_get_violation_status:2", (), "pass", None),
]


@pytest.mark.parametrize(("fault", "args", "status", "said"), CLI_SAMPLE)
def test_a_sample_through_the_cli(
    fake_rocm: Path, amd_sysfs: Path, tmp_path: Path, fault: str, args: tuple[str, ...], status: str, said: str | None
) -> None:
    path = tmp_path / "case.scenario"
    path.write_text(f"count=8\nload_ppt=1\ngfx_clk_load=1900\n{fault}\n")
    env = {**amd_env(fake_rocm, amd_sysfs, "healthy-8xmi300x"), "FAKE_AMDSMI_SCENARIO": str(path)}
    env["GPUENV_POWER_RECORD"] = str(tmp_path / "no-record.json")
    code, report, _ = verify_json("--check", "nvml", "--expect-gpus", "8", *args, env=env)
    result = check(report, "nvml")
    assert result["status"] == status and code == {"pass": 0, "warn": 0, "fail": 1}[status], result["summary"]
    if said:
        assert any(said in f["message"] for f in result["findings"]), result["findings"]
