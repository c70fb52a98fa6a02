"""The Grace-GPU C2C link: read through NVML's field values by the real bindings over the fake library, and
judged per GPU. Each rule has a case that fails or warns and a healthy control; a GPU without C2C is not
judged by it, and one that should have it but cannot be read warns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuenv.verify.checks.nvml.c2c import c2c_findings
from gpuenv.verify.checks.nvml.policy import load_policy
from tests.verify.conftest import check, scenario_env, verify_json

POLICY = load_policy()
GH200 = "NVIDIA GH200 480GB"


def _gpu(name: str, c2c: dict[str, Any] | None) -> dict[str, Any]:
    return {"index": 0, "name": name, "uuid": "GPU-0", "pci_bus_id": "00000009:01:00.0", "c2c": c2c}


def _links(n: int, *, down: int = 0, mbps: int = 44712, b2b: int = 0) -> dict[str, Any]:
    return {
        "links": [
            {"active": int(i < n - down), "mbps": mbps if i < n - down else 0, "replay_b2b": b2b} for i in range(n)
        ]
    }


@pytest.mark.parametrize(
    ("name", "c2c", "codes"),
    [
        (GH200, _links(10), []),  # healthy control
        (GH200, _links(10, down=2), [("nvml.c2c_down", "fail")]),
        (GH200, _links(10, b2b=3), [("nvml.c2c_replay", "warn")]),
        (GH200, _links(8), [("nvml.c2c_slow", "warn")]),  # fewer links than the estimate: warn, never fail
        (GH200, _links(10, mbps=20000), [("nvml.c2c_slow", "warn")]),
        (GH200, {"not_read": "NOT_SUPPORTED"}, [("nvml.c2c_unread", "warn")]),  # a Grace GPU says nothing
        ("NVIDIA H100 80GB HBM3", {"not_read": "NOT_SUPPORTED"}, []),  # no C2C to read: not judged by it
        ("NVIDIA GB200", _links(5), []),
        ("NVIDIA GB200", _links(5, down=5), [("nvml.c2c_down", "fail")]),
        (GH200, None, []),  # a snapshot that never asked (AMD SMI's)
    ],
)
def test_c2c_rules(name: str, c2c: dict[str, Any] | None, codes: list[tuple[str, str]]) -> None:
    found = c2c_findings(_gpu(name, c2c), POLICY)
    assert [(f.code, f.severity) for f in found] == codes, [f.message for f in found]


def test_a_down_link_is_named() -> None:
    [finding] = c2c_findings(_gpu(GH200, _links(10, down=2)), POLICY)
    assert "C2C link(s) 8, 9 inactive, 8 of 10 active" in finding.message


def test_a_healthy_gh200_reads_its_links_through_nvml(fake_nvml_dir: Path) -> None:
    code, report, _ = verify_json("--check", "nvml", "--passive", env=scenario_env(fake_nvml_dir, "gh200"))
    result = check(report, "nvml")
    assert not [f for f in result["findings"] if f["code"].startswith("nvml.c2c")], result["findings"]
    assert code == 0


def test_a_gh200_with_down_links_fails_through_nvml(fake_nvml_dir: Path) -> None:
    code, report, _ = verify_json("--check", "nvml", "--passive", env=scenario_env(fake_nvml_dir, "gh200-c2c-down"))
    found = {f["code"]: f for f in check(report, "nvml")["findings"]}
    assert code == 1 and found["nvml.c2c_down"]["severity"] == "fail"
    assert "8, 9 inactive" in found["nvml.c2c_down"]["message"] and "nvml.c2c_replay" in found


def test_a_gpu_without_c2c_adds_no_noise(fake_nvml_dir: Path) -> None:
    _, report, _ = verify_json("--check", "nvml", "--passive", env=scenario_env(fake_nvml_dir, "healthy-8xh100"))
    messages = [f["message"] for f in check(report, "nvml")["findings"]]
    assert not [m for m in messages if "c2c" in m.lower()], messages
