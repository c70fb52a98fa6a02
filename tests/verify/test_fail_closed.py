"""A node certified only when every GPU answered and every reading was judged: each fault a GPU
operator would drain for gives its verdict through the CLI over the fake libraries (and through
--passive where that path reads it), each new rule warns or fails as the policy says, and the
healthy controls (H100 SXM, A100 PCIe without bridges, MI300X, a mixed node) stay certified idle
and under load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.checks.nvml.under_load import LINK_POLL_S, LOAD_READY_S, hold_s
from gpuenv.verify.registry import CHECKS
from tests.verify.conftest import amd_env, check, scenario_env, verify_json


@pytest.fixture
def run(fake_nvml_dir: Path, fake_rocm: Path, amd_sysfs: Path, tmp_path: Path) -> Any:
    """`gpuenv verify --check nvml` over the fake NVIDIA or AMD library with the stand-in load;
    (exit code, the nvml check's result)."""

    def go(vendor: str, scenario: str, *args: str, **extra: str) -> tuple[int, dict[str, Any]]:
        marker = str(tmp_path / "load-marker")
        if vendor == "amd":
            env = amd_env(fake_rocm, amd_sysfs, scenario)
        else:
            env = {**scenario_env(fake_nvml_dir, scenario), "FAKE_NVML_LOAD_MARKER": marker}
            env |= {"GPUENV_TEST_FAULT": "nvml:standin", "GPUENV_TEST_LOAD_MARKER": marker}
        env |= {"GPUENV_POWER_RECORD": str(tmp_path / "no-record.json"), **extra}
        code, report, _ = verify_json("--check", "nvml", *args, env=env)
        return code, check(report, "nvml")

    return go


def above_info(result: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    return [
        (f["code"], f["severity"], (f["gpu"] or {}).get("index")) for f in result["findings"] if f["severity"] != "info"
    ]


def policy(tmp: Path, **body: Any) -> str:
    path = tmp / "policy.json"
    path.write_text(json.dumps({"schema": "gpuenv.nvml-policy/1", **body}))
    return str(path)


# The faults of the issue that drove these rules: (vendor, scenario, --passive too, exit, what must be found)
ROWS = [
    ("nvidia", "gpu-lost", True, 1, ("nvml.gpu_lost", "fail", 3)),
    ("nvidia", "gpu-lost-under-load", False, 1, ("nvml.gpu_lost", "fail", 3)),
    ("nvidia", "app-clocks", True, 0, ("nvml.clocks_configured", "warn", 4)),
    ("nvidia", "idle-under-load", False, 0, ("nvml.idle_under_load", "warn", 4)),
    ("nvidia", "power-cap-outlier", False, 0, ("nvml.clock_below_peers", "warn", 4)),
    ("nvidia", "hot-under-load", False, 0, ("nvml.temperature", "warn", 5)),
    ("nvidia", "xid-fatal", True, 1, ("nvml.xid", "fail", 4)),
    ("amd", "ppt-outlier", False, 0, ("nvml.clock_below_peers", "warn", 5)),
    ("amd", "hot-under-load", False, 0, ("nvml.temperature", "warn", 6)),
    ("amd", "gpu-lost", True, 1, ("nvml.gpu_lost", "fail", 3)),
]


@pytest.mark.parametrize(("vendor", "scenario", "passive", "code", "found"), ROWS)
def test_each_fault_gives_its_verdict(
    run: Any, vendor: str, scenario: str, passive: bool, code: int, found: tuple[str, str, int]
) -> None:
    for args in (("--passive",),) * passive + ((),):
        exit_code, result = run(vendor, scenario, *args)
        assert exit_code == code and found in above_info(result), (args, above_info(result))
        named = next(
            f for f in result["findings"] if (f["code"], f["severity"], (f["gpu"] or {}).get("index")) == found
        )
        assert f"GPU {found[2]}" in named["message"] and (found[1] != "fail" or named["action"] == "drain")


def test_lost_under_load_is_seen_only_under_load(run: Any) -> None:
    code, result = run("nvidia", "gpu-lost-under-load", "--passive")
    assert code == 0 and above_info(result) == []  # at idle GPU 3 answers: only the load shows it fell off
    code, result = run("nvidia", "gpu-lost-under-load")
    lost = next(f for f in result["findings"] if f["code"] == "nvml.gpu_lost")
    assert "under load" in lost["message"] and ("nvml.not_read_under_load", "warn", 3) in above_info(result)


def test_the_uncontained_the_unrecovered_and_the_reboot_xids_all_drain(run: Any) -> None:
    code, result = run("nvidia", "xid-fatal", "--passive")
    xids = {f["gpu"]["index"]: f for f in result["findings"] if f["code"] == "nvml.xid"}
    assert code == 1 and sorted(xids) == [2, 3, 4] and {f["action"] for f in xids.values()} == {"drain"}
    assert "XID 95 (Uncontained memory error)" in xids[2]["message"] and "reset the GPU" in xids[2]["remediation"]
    assert "XID 140 (ECC Unrecovered Error)" in xids[3]["message"]
    assert "recovery action: node reboot" in xids[4]["message"] and "reboot the node" in xids[4]["remediation"]


@pytest.mark.parametrize(("action", "severity"), [("0", "info"), ("1", "fail"), ("3", "fail")])
def test_xid_154_is_judged_by_the_recovery_action(run: Any, tmp_path: Path, action: str, severity: str) -> None:
    path = tmp_path / "xid154.scenario"
    path.write_text(f"count=8\nxid=gpu4:154\ngpu4.recovery_action={action}\n")
    _code, result = run("nvidia", "xid-fatal", "--passive", FAKE_NVML_SCENARIO=str(path))
    [xid] = [f for f in result["findings"] if f["item"] == "xid"]
    assert xid["severity"] == severity and xid["gpu"]["index"] == 4


# (vendor, scenario, rule, its default severity, whether --passive judges it too): each new rule
# made to warn and to fail by the policy
RULES = [
    ("nvidia", "gpu-lost", "gpu_lost", "fail", True),
    ("amd", "gpu-lost", "gpu_lost", "fail", True),
    ("nvidia", "read-failed", "read_failed", "warn", True),
    ("amd", "read-failed", "read_failed", "warn", True),
    ("nvidia", "unread-under-load", "not_read_under_load", "warn", False),
    ("amd", "unread-under-load", "not_read_under_load", "warn", False),
    ("nvidia", "idle-under-load", "idle_under_load", "warn", False),
    ("amd", "idle-under-load", "idle_under_load", "warn", False),
    ("nvidia", "app-clocks", "clocks_configured", "warn", True),
    ("amd", "host-limit", "clocks_configured", "warn", False),
    ("nvidia", "hot-under-load", "temperature", "warn", False),
    ("amd", "hot-under-load", "temperature", "warn", False),
    ("nvidia", "power-cap-outlier", "clock_below_peers", "warn", False),
    ("amd", "ppt-outlier", "clock_below_peers", "warn", False),
    ("amd", "ras-deferred", "ras_deferred", "fail", True),
    ("nvidia", "nvlink-inactive-sxm", "nvlink_down", "fail", True),
    ("amd", "xgmi-inactive", "nvlink_down", "fail", True),
]


@pytest.mark.parametrize(("vendor", "scenario", "rule", "default", "passive"), RULES)
def test_each_rule_warns_or_fails_as_the_policy_says(
    run: Any, tmp_path: Path, vendor: str, scenario: str, rule: str, default: str, passive: bool
) -> None:
    other = "warn" if default == "fail" else "fail"
    for severity, how in [(s, how) for s in (default, other) for how in ((), ("--passive",))[: 1 + passive]]:
        args = (*how, "--policy", policy(tmp_path, rules={rule: {"severity": severity}}))
        code, result = run(vendor, scenario, *args)
        mine = [s for c, s, _ in above_info(result) if c == f"nvml.{rule}"]
        assert mine and set(mine) == {severity} and code == (1 if "fail" in mine else 0), (how, above_info(result))


def test_a_read_that_fails_warns_and_the_policy_can_fail_it(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "failed.scenario"
    path.write_text("count=8\ngpu2.errors=nvmlDeviceGetRemappedRows:999\n")
    code, result = run("nvidia", "healthy-8xh100", "--passive", FAKE_NVML_SCENARIO=str(path))
    assert code == 0 and above_info(result) == [("nvml.read_failed", "warn", 2)]
    assert "UNKNOWN to nvmlDeviceGetRemappedRows (remapped_rows)" in result["summary"]
    strict = policy(tmp_path, rules={"read_failed": {"severity": "fail"}})
    code, result = run("nvidia", "healthy-8xh100", "--passive", "--policy", strict, FAKE_NVML_SCENARIO=str(path))
    assert code == 1 and above_info(result) == [("nvml.read_failed", "fail", 2)]


CONTROLS = [
    ("nvidia", "healthy-8xh100"),
    ("nvidia", "healthy-8xa100-pcie"),
    ("nvidia", "mixed-node"),
    ("nvidia", "lone-h200"),
    ("amd", "healthy-8xmi300x"),
    ("amd", "lone-mi300x"),
]


@pytest.mark.parametrize(("vendor", "scenario"), CONTROLS)
def test_healthy_controls_stay_certified_idle_and_under_load(run: Any, vendor: str, scenario: str) -> None:
    for args in (("--passive",), ()):
        code, result = run(vendor, scenario, *args)
        assert code == 0 and result["status"] == "pass" and above_info(result) == [], (args, above_info(result))


def test_links_absent_on_pcie_cards_and_a_lone_gpu_are_said_not_failed(run: Any) -> None:
    _code, result = run("nvidia", "healthy-8xa100-pcie", "--passive")
    [absent] = [f for f in result["findings"] if f["code"] == "nvml.nvlink-absent"]
    assert absent["message"].startswith("GPU 0, 1, 2, 3, 4, 5, 6, 7: NVLink absent")
    assert "A100 PCIe 80GB" in absent["message"]
    _code, result = run("nvidia", "lone-h200", "--passive")
    assert any(f["code"] == "nvml.nvlink-absent" and "a lone GPU" in f["message"] for f in result["findings"])


def test_pcie_cards_fail_where_the_policy_expects_bridges(run: Any, tmp_path: Path) -> None:
    bridged = policy(tmp_path, nvlink_bridges_expected=True)
    code, result = run("nvidia", "healthy-8xa100-pcie", "--passive", "--policy", bridged)
    assert code == 1 and {c for c, _, _ in above_info(result)} == {"nvml.nvlink_down"}
    assert "where the policy expects bridges" in result["summary"]


def test_a_mixed_node_judges_each_gpu_as_its_own_model(run: Any) -> None:
    _code, result = run("nvidia", "mixed-node")
    [mixed] = [f for f in result["findings"] if f["code"] == "nvml.mixed-models"]
    assert "NVIDIA H100 80GB HBM3: GPU 0, 1, 2, 3; NVIDIA A100-SXM4-80GB: GPU 4, 5, 6, 7" in mixed["message"]
    # the A100s at their 1410 MHz are not below the H100s' 1980: peers are compared by model
    assert not any(f["code"] == "nvml.clock_below_peers" for f in result["findings"])


def test_a_gpu_the_load_did_not_run_on_is_named(run: Any) -> None:
    loaded = ",".join(f"pci:0000:{0x18 + 0x10 * i:02x}:00" for i in range(7))  # not GPU 7
    code, result = run("nvidia", "healthy-8xh100", GPUENV_TEST_LOAD_GPUS=loaded)
    assert code == 0 and above_info(result) == [("nvml.idle_under_load", "warn", 7)]
    assert "the load process does not run on it" in result["summary"]
    code, result = run("nvidia", "healthy-8xh100", GPUENV_TEST_LOAD_GPUS=loaded + ",pci:0000:88:00")
    assert code == 0 and above_info(result) == []


def test_the_deep_level_holds_the_load_long_enough_to_see_heat_soak(run: Any, tmp_path: Path) -> None:
    shipped = load_policy()["load_sampling"]
    assert hold_s(shipped["deep"]) >= 60 and hold_s(shipped["quick"]) < 1  # quick stays as quick as it was
    nvml = next(c for c in CHECKS if c.name == "nvml")
    assert LOAD_READY_S + hold_s(shipped["deep"]) + LINK_POLL_S < nvml.timeout("deep")
    # GPU 2 throttles only after 2 s under load: quick's second of sampling misses it, a longer hold sees it
    code, result = run("nvidia", "heat-soak")
    assert code == 0 and above_info(result) == []
    soaked = policy(tmp_path, load_sampling={"deep": {"samples": 8, "interval_s": 0.5}})
    code, result = run("nvidia", "heat-soak", "--level", "deep", "--policy", soaked)
    assert code == 1 and ("nvml.throttled_under_load", "fail", 2) in above_info(result)


def test_deferred_ras_errors_fail_amd_gpus(run: Any) -> None:
    code, result = run("amd", "ras-deferred")
    assert code == 1 and above_info(result) == [("nvml.ras_deferred", "fail", 2)]
    assert "3 deferred ECC error(s)" in result["summary"]
