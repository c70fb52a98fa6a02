"""The nvml check on AMD Instinct GPUs under load, through the CLI over the fake AMD SMI with the
stand-in load (GPUENV_TEST_FAULT=nvml:standin): the GFX clock, temperature, power and the limits
of AMD SMI's violation status sampled while the load runs, its residency counters read before and
after, judged by NVIDIA's rules with AMD's limits (gpuenv/data/amdsmi-policy.json)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from gpuenv.verify.checks.nvml.amd import AMD_READER, residency_s
from gpuenv.verify.checks.nvml.load_rules import load_findings
from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.checks.nvml.under_load import Load, load_reading, read_links_under_load
from gpuenv.verify.facts import NvmlSnapshot
from gpuenv.verify.model import GpuRef
from tests.verify.conftest import AMD_BUS, amd_env, check, verify_json


def run_loaded(rocm: Path, sysfs: Path, scenario: str, *args: str) -> tuple[int, dict[str, Any]]:
    code, report, _ = verify_json("--check", "nvml", *args, env=amd_env(rocm, sysfs, scenario))
    return code, check(report, "nvml")


def above_info(result: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    return [
        (f["code"], f["severity"], (f["gpu"] or {}).get("index")) for f in result["findings"] if f["severity"] != "info"
    ]


def policy_file(tmp: Path, body: dict[str, Any]) -> str:
    path = tmp / "policy.json"
    path.write_text(json.dumps({"schema": "gpuenv.nvml-policy/1", **body}))
    return str(path)


def test_a_healthy_8xmi300x_under_load_passes_with_nothing_above_info(fake_rocm: Path, amd_sysfs: Path) -> None:
    code, result = run_loaded(fake_rocm, amd_sysfs, "healthy-8xmi300x", "--expect-gpus", "8")
    assert code == 0 and result["status"] == "pass" and above_info(result) == []
    gpus = result["detail"]["snapshot"]["gpus"]
    assert len(gpus) == 8
    for gpu in gpus:
        reading = gpu["under_load"]
        # PPT holds a busy MI300X at its power cap: read, counted, and normal
        assert reading["samples"] == 5 and reading["clock_events"] == {"ppt_pwr": 5}
        assert reading["sm_clock_median"] == 1900 and reading["temperature_max"] == 78
        assert reading["violation_s"]["ppt_pwr"] > 0 and reading["violation_s"]["socket_thrm"] == 0
    assert result["metrics"]["sm_clock_mhz"] == {str(i): 1900 for i in range(8)}
    assert not (fake_rocm / "load-marker").exists()  # the stand-in load is gone with its marker


def test_a_gpu_that_throttles_only_under_load_fails_naming_gpu_and_reason(fake_rocm: Path, amd_sysfs: Path) -> None:
    code, result = run_loaded(fake_rocm, amd_sysfs, "thermal-under-load")
    assert code == 1 and above_info(result) == [("nvml.throttled_under_load", "fail", 4)]
    [finding] = [f for f in result["findings"] if f["severity"] == "fail"]
    assert finding["action"] == "drain" and finding["gpu"]["pci_bus_id"] == AMD_BUS[4]
    assert finding["message"].startswith("GPU 4")
    assert "socket thermal limit asserted in 5 of 5 samples" in finding["message"]
    assert "HBM thermal limit asserted in 5 of 5 samples" in finding["message"]
    assert "HBM thermal violation counter grew by" in finding["message"]
    assert "amd-smi metric --throttle" in finding["remediation"] and "nvidia-smi" not in finding["remediation"]
    idle = result["detail"]["snapshot"]["gpus"][4]
    assert idle["thermal_limits"] == [] and idle["sm_clock"] == 132  # at idle nothing held it down


def test_a_low_gfx_clock_under_load_with_no_limit_warns(fake_rocm: Path, amd_sysfs: Path) -> None:
    code, result = run_loaded(fake_rocm, amd_sysfs, "low-clock-under-load")
    # far below its seven peers too, under the same (no) limits
    assert code == 0 and above_info(result) == [
        ("nvml.low_clock_under_load", "warn", 5),
        ("nvml.clock_below_peers", "warn", 5),
    ]
    said = "GFX clock 900 MHz under load, 43% of its 2100 MHz maximum, with no limit active in AMD SMI's"
    assert said in result["summary"]


def test_the_limits_judged_under_load_are_the_users_to_override(
    fake_rocm: Path, amd_sysfs: Path, tmp_path: Path
) -> None:
    # a site that counts PPT as a problem says so in its policy, as it would with NVIDIA's bits
    strict = policy_file(tmp_path, {"problem_clock_events": {"ppt_pwr": "PPT power limit"}, "failing_violations": {}})
    code, result = run_loaded(fake_rocm, amd_sysfs, "healthy-8xmi300x", "--policy", strict)
    assert code == 1 and above_info(result) == [("nvml.throttled_under_load", "fail", i) for i in range(8)]
    lenient = policy_file(tmp_path, {"rules": {"throttled_under_load": {"severity": "warn"}}})
    code, result = run_loaded(fake_rocm, amd_sysfs, "thermal-under-load", "--policy", lenient)
    assert code == 0 and above_info(result) == [("nvml.throttled_under_load", "warn", 4)]


def test_passive_reads_no_load(fake_rocm: Path, amd_sysfs: Path) -> None:
    code, result = run_loaded(fake_rocm, amd_sysfs, "thermal-under-load", "--passive")
    assert code == 0 and above_info(result) == []  # what only the load shows is not seen
    assert not any("under_load" in g for g in result["detail"]["snapshot"]["gpus"])
    assert any("clocks and throttling under load not judged" in f["message"] for f in result["findings"])


def test_residency_is_the_counters_share_of_the_ticks_over_the_seconds_sampled() -> None:
    before = {"counter": 1000, "socket_thrm": 0, "ppt_pwr": 500}
    after = {"counter": 3000, "socket_thrm": 500, "ppt_pwr": 2500, "hbm_thrm": 7}
    assert residency_s(before, after, 2.0) == {"socket_thrm": 0.5, "ppt_pwr": 2.0}
    assert residency_s(before, {**after, "counter": 1000}, 2.0) == {}  # no ticks: nothing to share
    assert residency_s({}, after, 2.0) == {}


def test_amd_limits_fail_by_name_and_ppt_alone_never_does() -> None:
    policy, g = load_policy(smi="amdsmi"), GpuRef(2)
    gpu = {"index": 2, "sm_clock_max": 2100}
    ppt = load_reading([{"clock_events": ["ppt_pwr"], "sm_clock": 1500}], {}, {}, 1.0)
    assert ppt["clock_events"] == {"ppt_pwr": 1} and load_findings({**gpu, "under_load": ppt}, policy, g) == []
    grown = load_reading(
        [{"clock_events": [], "sm_clock": 2000}],
        {"counter": 0, "vr_thrm": 0},
        {"counter": 1000, "vr_thrm": 300},
        1.0,
        residency_s,
    )
    [finding] = load_findings({**gpu, "under_load": grown}, policy, g)
    assert "voltage-regulator thermal violation counter grew by 0.30 s" in finding.message
    unread = load_reading([{"clock_events": None, "sm_clock": 900}], {}, {}, 1.0)
    [low] = load_findings({**gpu, "under_load": unread}, policy, g)  # limits unread: the clock is still judged
    assert low.code == "nvml.low_clock_under_load" and low.message.endswith("not read")


def test_without_a_load_amd_says_what_went_unjudged_and_nothing_of_pcie() -> None:
    snap = NvmlSnapshot("6.10.5", None, [{"index": 0, "name": "AMD Instinct MI300X"}])
    note = read_links_under_load(snap, [0], None, reader=AMD_READER)
    assert note == "AMD SMI clocks and throttling under load not judged: no GPU load on the CPU path"
    refused = read_links_under_load(
        snap, [0], contextlib.nullcontext(Load("torch sees no CUDA device")), reader=AMD_READER
    )
    assert refused == "AMD SMI clocks and throttling under load not judged: no GPU load (torch sees no CUDA device)"
    assert "under_load" not in snap.gpus[0]
