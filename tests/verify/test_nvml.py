"""The nvml check through the real pynvml bindings, over a fake libnvidia-ml.so.1 built from C
(scenario files in fake_nvml/) and over Debian's real libnvidia-ml1 with no driver loaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuenv.errors import BadRequest
from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.checks.nvml.rules import evaluate, gpu_findings
from gpuenv.verify.facts import HostFacts, NvmlSnapshot, visible
from gpuenv.verify.pci import nvidia_on_pci
from tests.verify.conftest import check, fake_sysfs, nvidia_bus, scenario_env, verify_json


def run_nvml(lib: Path, scenario: str, *args: str) -> tuple[int, dict[str, Any]]:
    code, report, _ = verify_json("--check", "nvml", *args, env=scenario_env(lib, scenario))
    return code, check(report, "nvml")


def problems(result: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    return [
        (f["item"], f["severity"], (f["gpu"] or {}).get("index")) for f in result["findings"] if f["severity"] != "info"
    ]


def test_healthy_8xh100_passes_and_names_every_gpu(fake_nvml_dir: Path) -> None:
    code, report, _ = verify_json(
        "--check", "nvml", "--expect-gpus", "8", env=scenario_env(fake_nvml_dir, "healthy-8xh100")
    )
    assert code == 0 and report["device"] == "cuda" and "NVML loads" in report["host"]["device_decision"]
    result = check(report, "nvml")
    assert result["status"] == "pass" and problems(result) == []
    gpus = report["host"]["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert gpus[3]["uuid"] == "GPU-00000000-0000-0000-0000-000000000003"
    assert gpus[3]["pci_bus_id"] == "00000000:48:00.0" and gpus[3]["serial"] == "1650000000003"
    # the fake lacks the fabric call: that item is unknown, reported, and not a failure
    assert any("fabric (FUNCTION_NOT_FOUND)" in f["message"] for f in result["findings"])


def test_ecc_errors_fail_naming_gpu_uuid_and_bus(fake_nvml_dir: Path) -> None:
    code, result = run_nvml(fake_nvml_dir, "ecc-errors")
    assert code == 1 and result["status"] == "fail"
    [finding] = [f for f in result["findings"] if f["severity"] == "fail"]
    assert finding["item"] == "ecc_uncorrected" and finding["action"] == "reset-gpu"
    assert finding["gpu"] == {
        "index": 3,
        "uuid": "GPU-00000000-0000-0000-0000-000000000003",
        "pci_bus_id": "00000000:48:00.0",
    }
    assert "4 uncorrectable" in finding["message"] and finding["remediation"]


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ("pcie-downgraded", [("pcie_downgraded", "fail", 5)]),
        ("thermal-slowdown", [("clock_slowdown", "fail", 1), ("temperature", "warn", 1)]),
        ("row-remap-pending", [("remapped_rows_pending", "fail", 6), ("remapped_rows_failure", "fail", 7)]),
        ("nvlink-down", [("nvlink_down", "fail", 4)]),
        ("xid", [("xid", "fail", 2), ("xid", "warn", 4)]),
        ("memory-held", [("memory_held", "fail", 3), ("leftover_processes", "warn", 5)]),
    ],
)
def test_faults_fail_naming_the_gpu(fake_nvml_dir: Path, scenario: str, expected: list[Any]) -> None:
    code, result = run_nvml(fake_nvml_dir, scenario)
    assert code == 1 and result["status"] == "fail"
    assert problems(result) == expected


def test_memory_held_without_a_process_is_judged_against_the_threshold() -> None:
    policy = load_policy()
    limit = policy["memory_held_mib"]

    def items(**gpu: Any) -> list[str]:
        return [f.item for f in gpu_findings({"index": 0, **gpu}, policy)]

    held = items(memory_used_mib=limit + 1, processes=[])
    assert held == ["memory_held"]
    [finding] = gpu_findings({"index": 0, "memory_used_mib": 900, "processes": []}, policy)
    assert finding.severity == "fail" and finding.action == "drain" and "900 MiB" in finding.message
    assert items(memory_used_mib=limit, processes=[]) == []  # the driver's own few MiB
    assert items(memory_used_mib=900, processes=[1234]) == ["leftover_processes"]
    assert items(memory_used_mib=900, processes=[], unknown={"processes": "NOT_SUPPORTED"}) == []
    assert items(memory_used_mib=900, processes=[], mig=1) == ["mig_enabled"]
    assert items(memory_used_mib=None, processes=[]) == []


def test_a_missing_gpu_fails_against_expect_gpus(fake_nvml_dir: Path) -> None:
    code, result = run_nvml(fake_nvml_dir, "gpu-missing", "--expect-gpus", "8")
    assert code == 1 and problems(result) == [("gpu_missing", "fail", None)]
    assert "7 GPU(s)" in result["findings"][0]["message"]
    code, result = run_nvml(fake_nvml_dir, "gpu-missing")  # nothing expected: seven is fine
    assert code == 0


def test_cuda_visible_devices_limits_the_count(fake_nvml_dir: Path) -> None:
    env = {**scenario_env(fake_nvml_dir, "healthy-8xh100"), "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    code, report, _ = verify_json("--check", "nvml", "--expect-gpus", "8", env=env)
    assert code == 1 and len(report["host"]["gpus"]) == 4


def test_not_supported_items_are_unknown_not_failures(fake_nvml_dir: Path) -> None:
    code, result = run_nvml(fake_nvml_dir, "not-supported")
    assert code == 0 and result["status"] == "pass"
    unknown = " ".join(f["message"] for f in result["findings"] if f["item"] == "unknown")
    for item in (
        "remapped_rows (NOT_SUPPORTED)",
        "clock_events (NOT_SUPPORTED)",
        "nvlink (NOT_SUPPORTED)",
        "serial (NOT_SUPPORTED)",
    ):
        assert item in unknown
    assert "unknown on GPU 2: serial" in unknown


def test_warnings_pass_unless_strict(fake_nvml_dir: Path) -> None:
    code, result = run_nvml(fake_nvml_dir, "persistence-off")
    assert code == 0 and result["status"] == "warn"
    assert ("leftover_processes", "warn", 0) in problems(result)
    code, _ = run_nvml(fake_nvml_dir, "persistence-off", "--strict")
    assert code == 1


def test_policy_file_changes_severities(fake_nvml_dir: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps({"schema": "gpuenv.nvml-policy/1", "rules": {"pcie_downgraded": {"severity": "warn"}}})
    )
    code, result = run_nvml(fake_nvml_dir, "pcie-downgraded", "--policy", str(policy))
    assert code == 0 and problems(result) == [("pcie_downgraded", "warn", 5)]


def test_bad_policy_is_a_bad_request(tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"schema": "gpuenv.nvml-policy/1", "rules": {"nonsense": {}}}))
    with pytest.raises(BadRequest):
        load_policy(policy)


def test_driver_not_loaded_fails_on_a_gpu_node(debian_nvml_dir: Path, tmp_path: Path) -> None:
    env = {"LD_LIBRARY_PATH": str(debian_nvml_dir), **nvidia_bus(tmp_path)}
    code, report, _ = verify_json("--check", "nvml", "--device", "cuda", env=env)
    result = check(report, "nvml")
    assert code == 1 and result["status"] == "fail" and "driver-not-loaded" in result["summary"]
    assert result["findings"][0]["action"] == "reinstall-driver"


def test_driver_not_loaded_without_an_nvidia_device_is_cpu_only(debian_nvml_dir: Path) -> None:
    code, report, _ = verify_json("--check", "nvml", env={"LD_LIBRARY_PATH": str(debian_nvml_dir)})
    assert report["cpu_only"] and check(report, "nvml")["status"] == "skip"
    assert "driver-not-loaded" in report["host"]["device_decision"]
    assert code == 3  # nothing could run: not a certificate


def test_pci_scan_finds_nvidia_gpus_only(tmp_path: Path) -> None:
    root = fake_sysfs(
        tmp_path,
        {
            "0000:18:00.0": ("0x10de", "0x030200"),
            "0000:28:00.0": ("0x10de", "0x030200"),
            "0000:05:00.0": ("0x10de", "0x068000"),  # NVSwitch: a bridge, not a GPU
            "0000:00:02.0": ("0x8086", "0x030000"),
        },
    )
    assert nvidia_on_pci(root) == ["0000:18:00.0", "0000:28:00.0"]
    assert nvidia_on_pci(tmp_path / "absent") == []


def test_gpu_on_the_bus_but_not_in_nvml_has_fallen_off() -> None:
    snap = NvmlSnapshot("580.65.06", "13.0", [{"index": 0, "pci_bus_id": "00000000:18:00.0", "unknown": {}}])
    host = HostFacts(pci_reference=("0000:18:00.0", "0000:28:00.0"))
    findings = evaluate(snap, load_policy(), expect_gpus=None, cuda_visible=None, host=host)
    assert [(f.item, f.severity, f.gpu.pci_bus_id if f.gpu else None) for f in findings] == [
        ("gpu_missing", "fail", "0000:28:00.0")
    ]


def test_visible_follows_cuda_visible_devices() -> None:
    gpus = [{"index": i, "uuid": f"GPU-aaaa{i}"} for i in range(4)]
    assert [g["index"] for g in visible(gpus, "2,0")] == [2, 0]
    assert [g["cuda_index"] for g in visible(gpus, "2,0")] == [0, 1]
    assert [g["index"] for g in visible(gpus, "GPU-aaaa3")] == [3]
    assert [g["index"] for g in visible(gpus, "1,9,2")] == [1]  # CUDA stops at an invalid entry
    assert visible(gpus, "") == []


def test_energy_counters_are_read_by_nvml_index(fake_nvml_dir: Path) -> None:
    import os
    import subprocess
    import sys

    code = (
        "import json; from gpuenv.adapters import nvml; assert nvml.init() is None; "
        "print(json.dumps([nvml.energy_mj([0, 3]), nvml.energy_mj([3])]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **scenario_env(fake_nvml_dir, "healthy-8xh100")},
    )
    first, second = json.loads(proc.stdout)
    assert set(first) == {"0", "3"} and second["3"] > first["3"]  # the counter only grows


def test_expecting_gpus_on_a_machine_without_any_fails() -> None:
    code, report, _ = verify_json("--check", "nvml", "--expect-gpus", "1", env={"LD_LIBRARY_PATH": ""})
    result = check(report, "nvml")
    assert code == 1 and result["status"] == "fail" and "1 expected" in result["summary"]


def test_an_xid_later_in_the_run_is_reported(fake_nvml_dir: Path) -> None:
    code, report, _ = verify_json("--check", "nvml", "--check", "stack", env=scenario_env(fake_nvml_dir, "xid-late"))
    result = check(report, "nvml")
    assert code == 1 and problems(result) == [("xid", "fail", 6)]
    assert "XID 48 during the run" in result["summary"]
