"""NVML's slow start with persistence mode off (the driver sets every GPU up on each first use):
the probe pays it once and holds NVML for the run, the finding says what it cost and the remedy,
and the probe's wait is the policy's probe_timeout_s, said by name when it runs out."""

from __future__ import annotations

import json
from pathlib import Path

from tests.verify.conftest import check, scenario_env, verify_json

DELAY_S = 1.5  # init_delay_ms of the scenario


def slow_env(lib: Path, tmp_path: Path) -> dict[str, str]:
    return {**scenario_env(lib, "persistence-off-slow-init"), "FAKE_NVML_DRIVER_LOCK": str(tmp_path / "driver.lock")}


def test_the_probe_pays_the_slow_start_once_and_the_finding_says_what_it_cost(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    code, report, _ = verify_json("--check", "nvml", env=slow_env(fake_nvml_dir, tmp_path))
    result = check(report, "nvml")
    assert code == 0 and result["status"] == "warn"
    assert result["metrics"]["init_s"] < DELAY_S  # the check's own nvmlInit: the probe held NVML
    persistence = [f for f in result["findings"] if f["code"] == "nvml.persistence_off"]
    assert len(persistence) == 8
    assert "persistence mode is off; NVML took 1." in persistence[0]["message"]
    assert "s to start" in persistence[0]["message"]
    assert "nvidia-smi -pm 1" in persistence[0]["remediation"]


def test_passive_times_its_one_start(fake_nvml_dir: Path, tmp_path: Path) -> None:
    code, report, _ = verify_json("--check", "nvml", "--passive", env=slow_env(fake_nvml_dir, tmp_path))
    [message] = {
        f["message"].split(": ", 1)[1] for f in check(report, "nvml")["findings"] if "persistence" in f["code"]
    }
    assert code == 0 and message.startswith("persistence mode is off; NVML took 1.")


def test_a_probe_past_the_policy_timeout_says_so_and_names_the_remedy(fake_nvml_dir: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"schema": "gpuenv.nvml-policy/1", "probe_timeout_s": 0.5}))
    env = slow_env(fake_nvml_dir, tmp_path)
    code, report, _ = verify_json("--check", "nvml", "--policy", str(policy), env=env)
    assert code == 0, report["verdict"]
    said = "NVML gave no answer within 0.5 s (probe_timeout_s in the NVML policy)"
    assert said in report["host"]["device_decision"]
    [timeout] = [f for f in check(report, "nvml")["findings"] if f["code"] == "nvml.probe-timeout"]
    assert timeout["severity"] == "warn" and said in timeout["message"] and "XIDs not watched" in timeout["message"]
    assert "nvidia-smi -pm 1" in timeout["remediation"] and "probe_timeout_s" in timeout["remediation"]
