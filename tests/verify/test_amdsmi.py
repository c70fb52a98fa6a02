"""The nvml check on AMD Instinct GPUs: the real `amdsmi` bindings over a fake libamd_smi.so built
from C (scenario files in fake_amdsmi/), with AMD GPUs on a stand-in PCI bus; and the pure halves
(PCI scan, probe choice, ROCm's visible devices, the FP8 format per architecture, ROCm torch)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpuenv.adapters import amdsmi as adapter
from gpuenv.platforms import nodes
from gpuenv.platforms.rocm.node import visible as rocm_visible
from gpuenv.verify.checks.fp8 import E4M3FN, E4M3FNUZ, fp8_format, no_fp8_reason
from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.checks.nvml.rules import evaluate
from gpuenv.verify.facts import HostFacts, NvmlSnapshot, gpu_node_note, host_facts, loads
from gpuenv.verify.pci import amd_on_pci, nvidia_on_pci
from gpuenv.verify.workloads.common import gpu_build
from tests.verify.conftest import AMD_BUS, amd_env, check, fake_sysfs, verify_json
from tests.verify.conftest import FAKE_AMDSMI as FAKE_AMDSMI  # other areas' tests import them from here
from tests.verify.conftest import amd_sysfs as amd_sysfs
from tests.verify.conftest import fake_rocm as fake_rocm


def run_amd(rocm: Path, sysfs: Path, scenario: str, *args: str) -> tuple[int, dict[str, Any], dict[str, Any]]:
    code, report, _ = verify_json("--check", "nvml", *args, env=amd_env(rocm, sysfs, scenario))
    return code, report, check(report, "nvml")


def problems(result: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    return [
        (f["item"], f["severity"], (f["gpu"] or {}).get("index")) for f in result["findings"] if f["severity"] != "info"
    ]


def test_healthy_8xmi300x_passes_and_names_every_gpu(fake_rocm: Path, amd_sysfs: Path) -> None:
    code, report, result = run_amd(fake_rocm, amd_sysfs, "healthy-8xmi300x", "--expect-gpus", "8")
    assert code == 0 and report["device"] == "cuda", result["summary"]
    decision = report["host"]["device_decision"]
    assert decision == "8 AMD GPU(s) on the PCI bus: a GPU node, workloads run on ROCm (torch's cuda device)"
    assert result["status"] == "pass" and problems(result) == []
    assert result["metrics"]["smi"] == "amdsmi" and result["metrics"]["driver"] == "6.10.5"
    assert "8 GPU(s) (AMD Instinct MI300X), amdgpu 6.10.5, all healthy" in result["summary"]
    gpus = report["host"]["gpus"]
    assert [g["index"] for g in gpus] == list(range(8)) and {g["gfx"] for g in gpus} == {"gfx942"}
    assert gpus[3]["uuid"] == "03ff74a1-0000-1000-80c6-000000000003" and gpus[3]["pci_bus_id"] == "0000:35:00.0"
    assert gpus[3]["serial"] == "6922510010003"
    # read under load (the stand-in load); what AMD SMI is not asked is said, not passed over
    assert all(g["under_load"]["samples"] == 5 for g in result["detail"]["snapshot"]["gpus"])
    assert any(f["message"] == "AMD SMI: PCIe link state not read" for f in result["findings"])


@pytest.mark.parametrize(
    ("scenario", "expected", "said"),
    [
        ("ecc-uncorrected", [("ecc_uncorrected", "fail", 3)], "4 uncorrectable ECC error(s)"),
        ("xgmi-down", [("nvlink_down", "fail", 5)], "XGMI link(s) 2 down"),
        (
            "hot",  # held down at idle, and so under load too
            [("clock_slowdown", "fail", 6), ("temperature", "warn", 6), ("throttled_under_load", "fail", 6)],
            "104 °C, critical at 105 °C",
        ),
    ],
)
def test_faults_fail_naming_the_gpu(
    fake_rocm: Path, amd_sysfs: Path, scenario: str, expected: list[Any], said: str
) -> None:
    code, _report, result = run_amd(fake_rocm, amd_sysfs, scenario)
    assert code == 1 and result["status"] == "fail"
    assert problems(result) == expected
    bad = [f for f in result["findings"] if f["severity"] != "info"]
    index = expected[0][2]
    assert all(f["gpu"]["pci_bus_id"] == AMD_BUS[index] and f["gpu"]["uuid"] for f in bad)
    assert any(said in f["message"] for f in bad), [f["message"] for f in bad]


def test_the_same_codes_as_nvidia_with_amd_remediations(fake_rocm: Path, amd_sysfs: Path) -> None:
    _code, _report, result = run_amd(fake_rocm, amd_sysfs, "ecc-uncorrected")
    [finding] = [f for f in result["findings"] if f["severity"] == "fail"]
    assert finding["code"] == "nvml.ecc_uncorrected" and finding["action"] == "reset-gpu"
    assert "amd-smi reset" in finding["remediation"] and "nvidia-smi" not in finding["remediation"]


def test_bad_pages_processes_and_power_cap(fake_rocm: Path, amd_sysfs: Path) -> None:
    code, _report, result = run_amd(fake_rocm, amd_sysfs, "bad-pages")
    assert code == 1
    assert sorted(problems(result), key=lambda p: p[2] or 0) == [
        ("leftover_processes", "warn", 1),
        ("retired_pages_pending", "fail", 2),
        ("bad_pages_unreservable", "fail", 4),
        ("power_capped", "warn", 7),
    ]
    capped = next(f for f in result["findings"] if f["item"] == "power_capped")
    assert "power limit 500 W enforced, below its default 750 W" in capped["message"]


def test_a_gpu_on_the_bus_that_amd_smi_cannot_see_has_fallen_off() -> None:
    # pure: the PCI scope of the machine running the tests (often a container) is not the host's
    snap = NvmlSnapshot("6.10.5", None, [{"index": i, "pci_bus_id": bus} for i, bus in enumerate(AMD_BUS[:7])])
    host = HostFacts(smi="amdsmi", pci_amd=tuple(AMD_BUS), pci_reference=tuple(AMD_BUS))
    findings = evaluate(snap, load_policy(smi="amdsmi"), expect_gpus=None, cuda_visible=None, host=host)
    assert [(f.item, f.severity) for f in findings] == [("gpu_missing", "fail")]
    assert findings[0].message == (
        "AMD GPU at PCI 0000:75:00.0 is on the bus but AMD SMI cannot see it (fallen off the bus)"
    )


def test_rocr_visible_devices_limits_the_count(fake_rocm: Path, amd_sysfs: Path) -> None:
    env = amd_env(fake_rocm, amd_sysfs, "healthy-8xmi300x", ROCR_VISIBLE_DEVICES="0,1,2,3")
    code, report, _ = verify_json("--check", "nvml", "--expect-gpus", "8", env=env)
    assert code == 1 and len(report["host"]["gpus"]) == 4
    assert "AMD SMI shows 4 GPU(s) visible to this process, 8 expected" in check(report, "nvml")["summary"]


def test_passive_reads_amd_smi_in_this_process(fake_rocm: Path, amd_sysfs: Path) -> None:
    code, report, result = run_amd(fake_rocm, amd_sysfs, "xgmi-down", "--passive")
    assert code == 1 and report["host"]["device_decision"] == "passive: AMD SMI ok, 8 AMD GPU(s) on the PCI bus"
    assert problems(result) == [("nvlink_down", "fail", 5)]


def test_a_missing_library_is_exit_3_with_the_reason(tmp_path: Path, amd_sysfs: Path) -> None:
    env = amd_env(tmp_path, amd_sysfs, "healthy-8xmi300x")  # ROCM_PATH without lib/libamd_smi.so
    code, report, stderr = verify_json("--check", "nvml", env=env)
    result = check(report, "nvml")
    assert code == 3 and result["status"] == "error" and report["verdict"]["outcome"] == "could not run"
    assert "libamd_smi.so" in result["summary"] and "ROCM_PATH" in result["summary"], result["summary"]
    assert result["findings"][0]["code"] == "nvml.amdsmi-missing" and "Traceback" not in stderr


def test_a_driver_that_is_not_loaded_fails_the_node(fake_rocm: Path, amd_sysfs: Path) -> None:
    code, report, result = run_amd(fake_rocm, amd_sysfs, "driver-not-loaded")
    assert code == 1 and result["status"] == "fail" and "driver-not-loaded" in result["summary"]
    [finding] = result["findings"]
    assert finding["code"] == "nvml.amdsmi-init-failed" and "amdgpu" in finding["remediation"]
    assert report["device"] == "cuda"  # AMD GPUs on the bus: a GPU node, not a CPU fallback


def test_missing_bindings_are_gpuenvs_own_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    def absent() -> Any:
        raise ImportError("No module named 'amdsmi'")

    monkeypatch.setattr(adapter, "_amdsmi", absent)
    problem = adapter.init()
    assert problem is not None and problem.startswith("amdsmi not installed") and "gpuenv[rocm]" in problem
    assert adapter.missing(problem) and not adapter.missing("driver-not-loaded")


def test_pci_scan_finds_amd_gpus_by_class(tmp_path: Path) -> None:
    root = fake_sysfs(
        tmp_path,
        {
            "0000:05:00.0": ("0x1002", "0x120000"),  # MI300X: processing accelerator
            "0000:15:00.0": ("0x1002", "0x038000"),  # MI250X: display controller
            "0000:15:00.1": ("0x1002", "0x040300"),  # audio
            "0000:18:00.0": ("0x10de", "0x030200"),
        },
    )
    assert amd_on_pci(root) == ["0000:05:00.0", "0000:15:00.0"]
    assert nvidia_on_pci(root) == ["0000:18:00.0"]


def test_amd_smi_is_asked_only_where_nvml_cannot_name_the_gpus() -> None:
    asked: list[bool] = []

    amd = {"smi": "amdsmi", "nvml": "library-not-found: libamd_smi.so"}

    def prefer(nvml: dict[str, Any], *, amd_bus: list[str], nvidia_bus: list[str]) -> dict[str, Any]:
        def probe(node: nodes.GpuNode) -> dict[str, Any]:
            asked.append(node.smi == "amdsmi")
            return nvml if node.smi == "nvml" else amd

        return nodes.probed(probe, loads, {"nvml": nvidia_bus, "amdsmi": amd_bus})[1]

    ok = {"nvml": "ok", "gpus": [{"index": 0}]}
    assert prefer(ok, amd_bus=[], nvidia_bus=[]) is ok and not any(asked)
    failed = {"nvml": "library-not-found"}
    assert prefer(failed, amd_bus=[], nvidia_bus=["0000:18:00.0"]) is failed and not any(asked)
    assert prefer(failed, amd_bus=[], nvidia_bus=[]) is failed  # nothing AMD: NVML's reason stands
    assert prefer(failed, amd_bus=AMD_BUS, nvidia_bus=[])["smi"] == "amdsmi"  # AMD's reason matters
    both = ["0000:18:00.0"]
    assert prefer(failed, amd_bus=AMD_BUS, nvidia_bus=both)["smi"] == "amdsmi"  # both vendors: the last one's


def test_host_facts_on_an_amd_node() -> None:
    probe = {"smi": "amdsmi", "nvml": "ok", "gpus": [{"index": i, "gfx": "gfx942"} for i in range(8)]}
    facts = host_facts(
        probe, pci_nvidia=[], pci_amd=AMD_BUS, driver_gpus=None, scope="host", environ={"HIP_VISIBLE_DEVICES": "1,2"}
    )
    assert facts.smi == "amdsmi" and facts.pci_reference == tuple(AMD_BUS)
    assert [(g.index, g.cuda_index, g.gfx) for g in facts.gpus] == [(1, 0, "gfx942"), (2, 1, "gfx942")]
    assert HostFacts.from_dict(facts.to_dict()) == facts
    assert gpu_node_note(facts) == "8 AMD GPU(s) on the PCI bus"
    in_container = host_facts(probe, pci_nvidia=[], pci_amd=AMD_BUS, driver_gpus=None, scope="container", environ={})
    assert in_container.pci_reference is None  # sysfs shows the host's GPUs: not compared


def test_rocm_visible_devices_compose() -> None:
    gpus = [{"index": i, "uuid": f"{i:02x}ff74a1-0000"} for i in range(8)]
    assert rocm_visible(gpus, {}) is None
    assert rocm_visible(gpus, {"ROCR_VISIBLE_DEVICES": "4,5,6"}) == "4,5,6"
    assert rocm_visible(gpus, {"ROCR_VISIBLE_DEVICES": "4,5,6", "HIP_VISIBLE_DEVICES": "2"}) == "6"
    assert rocm_visible(gpus, {"CUDA_VISIBLE_DEVICES": "GPU-03ff"}) == "3"
    assert rocm_visible(gpus, {"HIP_VISIBLE_DEVICES": "1,9,2"}) == "1"  # stops at the first invalid entry


def test_fp8_format_follows_the_architecture() -> None:
    assert fp8_format((9, 4), "gfx942:sramecc+:xnack-") == E4M3FNUZ
    assert E4M3FNUZ.dtype == "float8_e4m3fnuz" and E4M3FNUZ.largest == 240.0
    assert fp8_format((9, 5), "gfx950:sramecc+:xnack-") == E4M3FN and E4M3FN.largest == 448.0
    assert fp8_format((9, 0), "gfx90a:sramecc+:xnack-") is None  # MI250X: ROCm says 9.0, no FP8
    assert fp8_format((8, 9)) == E4M3FN and fp8_format((9, 0)) == E4M3FN and fp8_format((8, 6)) is None
    assert "gfx90a: FP8 needs gfx942" in no_fp8_reason("AMD Instinct MI250X", (9, 0), "gfx90a:sramecc+:xnack-")
    assert no_fp8_reason("NVIDIA A100", (8, 0), None).endswith("is sm_80: FP8 tensor cores need sm_89+")


def test_a_rocm_torch_is_a_gpu_build() -> None:
    assert gpu_build(SimpleNamespace(cuda=None, hip="6.4.43482")) == "ROCm (HIP 6.4.43482)"
    assert gpu_build(SimpleNamespace(cuda="12.8", hip=None)) == "CUDA 12.8"
    assert gpu_build(SimpleNamespace(cuda=None, hip=None)) is None
    assert gpu_build(SimpleNamespace(cuda=None)) is None  # an old torch without torch.version.hip
