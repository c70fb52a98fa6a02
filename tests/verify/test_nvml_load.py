"""The nvml check under load, through the CLI over the fake NVML with the stand-in load
(GPUENV_TEST_FAULT=nvml:standin): clock-event reasons, SM clock and violation counters sampled
while the load runs, and the power limit against the default (with tune power's record)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpuenv.power import record
from gpuenv.verify.checks.nvml.load_rules import load_findings, power_findings
from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.checks.nvml.under_load import load_reading
from gpuenv.verify.model import GpuRef
from tests.verify.conftest import check, scenario_env, verify_json


def loaded_env(lib: Path, scenario: str, tmp: Path) -> dict[str, str]:
    marker = str(tmp / "load-marker")
    return {
        **scenario_env(lib, scenario),
        "GPUENV_TEST_FAULT": "nvml:standin",
        "GPUENV_TEST_LOAD_MARKER": marker,
        "FAKE_NVML_LOAD_MARKER": marker,
        "GPUENV_POWER_RECORD": str(tmp / "power-applied.json"),
    }


def run_loaded(lib: Path, scenario: str, tmp: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code, report, _ = verify_json("--check", "nvml", *args, env=loaded_env(lib, scenario, tmp))
    return code, check(report, "nvml")


def above_info(result: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    return [
        (f["code"], f["severity"], (f["gpu"] or {}).get("index")) for f in result["findings"] if f["severity"] != "info"
    ]


def policy_file(tmp: Path, **rules: str) -> str:
    path = tmp / "policy.json"
    body = {"schema": "gpuenv.nvml-policy/1", "rules": {name: {"severity": sev} for name, sev in rules.items()}}
    path.write_text(json.dumps(body))
    return str(path)


def test_a_healthy_node_under_load_passes_with_nothing_above_info(fake_nvml_dir: Path, tmp_path: Path) -> None:
    code, result = run_loaded(fake_nvml_dir, "healthy-8xh100", tmp_path, "--expect-gpus", "8")
    assert code == 0 and result["status"] == "pass" and above_info(result) == []
    gpus = result["detail"]["snapshot"]["gpus"]
    assert len(gpus) == 8 and all(g["pcie"]["under_load"] for g in gpus)
    reading = gpus[0]["under_load"]
    assert reading["samples"] == 5 and reading["sm_clock_median"] == 1980 and reading["clock_events"] == {}
    assert result["metrics"]["sm_clock_mhz"]["0"] == 1980
    assert not (tmp_path / "load-marker").exists()  # the stand-in load is gone with its marker
    assert not any("not judged" in f["message"] for f in result["findings"])


def test_a_gpu_that_throttles_only_under_load_fails_naming_gpu_and_reason(fake_nvml_dir: Path, tmp_path: Path) -> None:
    code, result = run_loaded(fake_nvml_dir, "throttle-under-load", tmp_path)
    # 87 °C under load, 3 °C from its slowdown: the idle margin holds under load too
    assert code == 1 and above_info(result) == [
        ("nvml.temperature", "warn", 2),
        ("nvml.throttled_under_load", "fail", 2),
    ]
    [finding] = [f for f in result["findings"] if f["severity"] == "fail"]
    assert finding["action"] == "drain" and finding["gpu"]["uuid"].endswith("000000000002")
    assert "HW thermal slowdown asserted in 5 of 5 samples" in finding["message"]
    assert "thermal limit violation counter grew by" in finding["message"]
    idle = result["detail"]["snapshot"]["gpus"][2]["clock_events"]
    assert idle == 0x1  # at idle nothing held it down: only the load shows it


def test_throttling_under_load_warns_where_the_policy_says_so(fake_nvml_dir: Path, tmp_path: Path) -> None:
    policy = policy_file(tmp_path, throttled_under_load="warn")
    code, result = run_loaded(fake_nvml_dir, "throttle-under-load", tmp_path, "--policy", policy)
    assert code == 0 and above_info(result) == [
        ("nvml.temperature", "warn", 2),
        ("nvml.throttled_under_load", "warn", 2),
    ]


def test_sw_power_cap_under_heavy_load_is_normal(fake_nvml_dir: Path, tmp_path: Path) -> None:
    code, result = run_loaded(fake_nvml_dir, "power-cap-normal", tmp_path)
    assert code == 0 and above_info(result) == []
    reading = result["detail"]["snapshot"]["gpus"][0]["under_load"]
    assert reading["clock_events"] == {"0x4": 5} and reading["violation_s"]["power"] > 0


def test_a_low_clock_under_load_with_no_reason_warns(fake_nvml_dir: Path, tmp_path: Path) -> None:
    code, result = run_loaded(fake_nvml_dir, "low-clock-under-load", tmp_path)
    low = [("nvml.low_clock_under_load", "warn", 5), ("nvml.clock_below_peers", "warn", 5)]
    assert code == 0 and above_info(result) == low
    assert "900 MHz under load, 45% of its 1980 MHz maximum" in result["summary"]
    code, result = run_loaded(
        fake_nvml_dir, "low-clock-under-load", tmp_path, "--policy", policy_file(tmp_path, low_clock_under_load="fail")
    )
    assert code == 1 and above_info(result) == [("nvml.low_clock_under_load", "fail", 5), low[1]]


def test_a_power_cap_below_the_default_warns_naming_limit_and_default(fake_nvml_dir: Path, tmp_path: Path) -> None:
    code, result = run_loaded(fake_nvml_dir, "power-capped", tmp_path)
    assert code == 0 and above_info(result) == [("nvml.power_capped", "warn", 3)]
    assert "power limit 400 W enforced, below its default 700 W" in result["summary"]
    code, result = run_loaded(
        fake_nvml_dir, "power-capped", tmp_path, "--policy", policy_file(tmp_path, power_capped="fail")
    )
    assert code == 1 and above_info(result) == [("nvml.power_capped", "fail", 3)]


def test_a_cap_tune_power_recorded_is_info(fake_nvml_dir: Path, tmp_path: Path) -> None:
    uuid = "GPU-00000000-0000-0000-0000-000000000003"
    record.write(tmp_path / "power-applied.json", [record.AppliedCap(3, uuid, 400_000)])
    code, result = run_loaded(fake_nvml_dir, "power-capped", tmp_path, "--strict")
    assert code == 0 and above_info(result) == []
    [applied] = [f for f in result["findings"] if f["code"] == "nvml.power-cap-applied"]
    assert applied["severity"] == "info" and "applied by gpuenv tune power" in applied["message"]
    record.write(tmp_path / "power-applied.json", [record.AppliedCap(3, uuid, 500_000)])  # not this cap
    code, result = run_loaded(fake_nvml_dir, "power-capped", tmp_path)
    assert above_info(result) == [("nvml.power_capped", "warn", 3)]


@pytest.mark.parametrize("spoil", ["world-writable", "symlink", "not-json", "nan", "wrong-schema", "fifo"])
def test_an_untrustworthy_power_record_is_ignored_with_a_warning(
    fake_nvml_dir: Path, tmp_path: Path, spoil: str
) -> None:
    path = tmp_path / "power-applied.json"
    good = tmp_path / "good.json"
    record.write(good, [record.AppliedCap(3, None, 400_000)])
    if spoil == "world-writable":
        record.write(path, [record.AppliedCap(3, None, 400_000)])
        path.chmod(0o666)
    elif spoil == "symlink":
        path.symlink_to(good)
    elif spoil == "fifo":
        os.mkfifo(path, 0o644)
    else:
        text = {"not-json": "{", "nan": '{"schema": "gpuenv.power-applied/1", "gpus": [], "x": NaN}'}
        path.write_text(text.get(spoil, '{"schema": "other", "gpus": []}'))
    code, result = run_loaded(fake_nvml_dir, "power-capped", tmp_path)
    assert code == 0
    assert above_info(result) == [("nvml.power-record-ignored", "warn", None), ("nvml.power_capped", "warn", 3)]


def test_violation_counters_alone_fail_and_power_counters_never_do() -> None:
    policy = load_policy()
    g = GpuRef(1)
    gpu = {"index": 1, "sm_clock_max": 1980}
    grown = load_reading(
        [{"clock_events": 0, "sm_clock": 1900}], {"thermal": 0, "power": 0}, {"thermal": 3e8, "power": 9e9}, 1.0
    )
    [finding] = load_findings({**gpu, "under_load": grown}, policy, g)
    assert (
        finding.code == "nvml.throttled_under_load"
        and "thermal limit violation counter grew by 0.30 s" in finding.message
    )
    power_only = load_reading([{"clock_events": 4, "sm_clock": 1500}], {"power": 0}, {"power": 9e9}, 1.0)
    assert load_findings({**gpu, "under_load": power_only}, policy, g) == []
    # the low-clock rule: a reading below the fraction of the maximum, whatever the reasons (or none read)
    at_edge = load_reading([{"clock_events": 0, "sm_clock": int(0.6 * 1980)}], {}, {}, 1.0)
    assert load_findings({**gpu, "under_load": at_edge}, policy, g) == []
    unread = load_reading([{"clock_events": None, "sm_clock": 900}], {}, {}, 1.0)
    [low] = load_findings({**gpu, "under_load": unread}, policy, g)
    assert low.code == "nvml.low_clock_under_load" and low.message.endswith("clock-event reasons not read")


def test_the_power_rule_needs_both_limits_and_allows_a_watt() -> None:
    policy, g = load_policy(), GpuRef(0)

    def codes(enforced: int | None, default: int | None) -> list[str]:
        gpu = {"index": 0, "power": {"enforced_mw": enforced, "default_mw": default}}
        return [f.code for f in power_findings(gpu, policy, g, None)]

    assert codes(699_500, 700_000) == [] and codes(None, 700_000) == [] and codes(400_000, None) == []
    assert codes(698_000, 700_000) == ["nvml.power_capped"]
