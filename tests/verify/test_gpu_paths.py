"""What a real GPU node would hit, proven without one: the NVSwitch fabric, PCIe links that train
down at idle, gpuenv's own processes, containers, XIDs that outlive the worker, compute modes.
Through the real pynvml bindings over the fake libnvidia-ml.so.1 where NVML is involved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.checks.nvml.rules import evaluate, gpu_findings
from gpuenv.verify.checks.nvml.under_load import Load, read_links_under_load
from gpuenv.verify.facts import HostFacts, NvmlSnapshot, bus_reference
from gpuenv.verify.pci import driver_gpus, pci_scope
from tests.verify.conftest import check, scenario_env, verify_json
from tests.verify.test_nvml import problems, run_nvml


def in_fake_nvml(lib: Path, scenario: str, code: str) -> Any:
    """Run `code` (which prints JSON) in a fresh process that loads the fake library."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **scenario_env(lib, scenario)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


# ---- 1. fabric info, passed by reference --------------------------------------------------


def test_an_nvswitch_node_with_one_gpu_outside_the_fabric_fails_naming_it(fake_nvml_dir: Path) -> None:
    code, result = run_nvml(fake_nvml_dir, "nvswitch-one-outside")
    assert code == 1 and problems(result) == [("fabric_not_ready", "fail", 5)]
    [finding] = [f for f in result["findings"] if f["item"] == "fabric_not_ready"]
    assert "GPU-00000000-0000-0000-0000-000000000005" in finding["message"]
    assert "outside the NVSwitch fabric" in finding["message"] and "not started" in finding["message"]


def test_a_complete_fabric_passes_and_is_read(fake_nvml_dir: Path) -> None:
    code, result = run_nvml(fake_nvml_dir, "nvswitch-complete")
    assert code == 0 and result["status"] == "pass"
    fabrics = [g["fabric"] for g in result["detail"]["snapshot"]["gpus"]]
    assert fabrics == [{"state": 3, "status": 0, "clique": 1}] * 8
    assert not any("fabric" in f["message"] for f in result["findings"])


def test_a_gpu_in_another_clique_is_outside_the_nodes_fabric() -> None:
    gpus = [{"index": i, "fabric": {"state": 3, "status": 0, "clique": 7 if i == 2 else 1}} for i in range(4)]
    findings = evaluate(
        NvmlSnapshot("580", "13.0", gpus), load_policy(), expect_gpus=None, cuda_visible=None, host=HostFacts()
    )
    assert [(f.item, f.gpu.index if f.gpu else None) for f in findings] == [("fabric_not_ready", 2)]


# ---- 2. PCIe generation judged under confirmed load only -----------------------------------

UNDER_LOAD = """
import contextlib, json
from gpuenv.adapters import nvml as adapter
from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.checks.nvml.rules import evaluate
from gpuenv.verify.checks.nvml.under_load import Load, read_links_under_load
from gpuenv.verify.facts import HostFacts, NvmlSnapshot
assert adapter.init() is None
snap = NvmlSnapshot.from_dict(adapter.snapshot())
idle = [g["pcie"]["gen"] for g in snap.gpus]
note = read_links_under_load(snap, [g["index"] for g in snap.gpus], contextlib.nullcontext(Load()))
findings = evaluate(snap, load_policy(), expect_gpus=None, cuda_visible=None, host=HostFacts())
print(json.dumps({"idle": idle, "loaded": [g["pcie"] for g in snap.gpus], "note": note,
                  "findings": [(f.item, f.gpu.index) for f in findings if f.severity != "info" and "pcie" in f.item]}))
"""


def test_an_idle_gen1_link_that_reaches_max_under_load_passes(fake_nvml_dir: Path) -> None:
    seen = in_fake_nvml(fake_nvml_dir, "pcie-idle-gen1", UNDER_LOAD)
    assert seen["idle"] == [1] * 8  # what the old check judged: a healthy node drained
    assert [p["gen"] for p in seen["loaded"]] == [5] * 8 and all(p["under_load"] for p in seen["loaded"])
    assert seen["note"] is None and seen["findings"] == []


def test_a_link_that_stays_slow_under_load_fails(fake_nvml_dir: Path) -> None:
    seen = in_fake_nvml(fake_nvml_dir, "pcie-stuck-gen1", UNDER_LOAD)
    assert seen["findings"] == [["pcie_downgraded", 2]]


def test_without_load_the_generation_is_not_judged_but_the_width_is(fake_nvml_dir: Path) -> None:
    # no CUDA torch here: the load process says so, the idle Gen1 is not held against the node
    code, result = run_nvml(fake_nvml_dir, "pcie-idle-gen1")
    assert code == 0 and result["status"] == "pass"
    assert any("PCIe generation not judged" in f["message"] for f in result["findings"])
    code, result = run_nvml(fake_nvml_dir, "pcie-downgraded")  # x8 of x16 at idle: still a fail
    assert code == 1 and problems(result) == [("pcie_downgraded", "fail", 5)]


def test_load_confirmation_is_required() -> None:
    gpus = [{"index": 0, "pcie": {"gen": 1, "max_gen": 5, "width": 16, "max_width": 16, "under_load": False}}]
    snap = NvmlSnapshot("580", "13.0", gpus)

    class Refused:
        def __enter__(self) -> Load:
            return Load("torch sees no CUDA device")

        def __exit__(self, *exc: object) -> None:
            return None

    note = read_links_under_load(snap, [0], Refused())
    assert note is not None and "torch sees no CUDA device" in note
    assert gpu_findings(snap.gpus[0], load_policy()) == []


# ---- 3. gpuenv's own processes are never leftovers ----------------------------------------


def test_gpuenvs_own_process_is_never_a_leftover(fake_nvml_dir: Path) -> None:
    code, result = run_nvml(fake_nvml_dir, "self-process")
    assert code == 0 and result["status"] == "pass", result["findings"]
    [gpu0] = [g for g in result["detail"]["snapshot"]["gpus"] if g["index"] == 0]
    assert len(gpu0["processes"]) == 2  # NVML did list them: the check left them out


def test_other_processes_are_still_leftovers() -> None:
    gpu = {"index": 0, "processes": [111, 4242]}
    [finding] = gpu_findings(gpu, load_policy(), own_pids=frozenset({111}))
    assert finding.item == "leftover_processes" and "4242" in finding.message and "111" not in finding.message


# ---- 4. containers and job slices see the host's whole PCI bus ----------------------------


def test_bus_reference_by_scope() -> None:
    bus = ["0000:18:00.0", "0000:28:00.0", "0000:38:00.0"]
    assert bus_reference(bus, None, "host")[0] == tuple(bus)
    assert bus_reference(bus, ["0000:28:00.0"], "container")[0] == ("0000:28:00.0",)
    assert bus_reference(bus, None, "container")[0] is None
    assert bus_reference(bus, bus, "job")[0] is None


def test_a_container_given_one_gpu_does_not_miss_the_others() -> None:
    reference, _ = bus_reference(["0000:18:00.0", "0000:28:00.0"], ["0000:28:00.0"], "container")
    snap = NvmlSnapshot("580", "13.0", [{"index": 0, "pci_bus_id": "00000000:28:00.0"}])
    host = HostFacts(pci_nvidia=("0000:18:00.0", "0000:28:00.0"), pci_reference=reference, pci_scope="container")
    assert evaluate(snap, load_policy(), expect_gpus=None, cuda_visible=None, host=host) == []


def test_scope_and_driver_list_are_read_from_the_filesystem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("container", "SLURM_JOB_ID", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    assert pci_scope(tmp_path) == "host"
    (tmp_path / ".dockerenv").touch()
    assert pci_scope(tmp_path) == "container"
    (tmp_path / ".dockerenv").unlink()
    with monkeypatch.context() as pod:  # a Kubernetes pod (containerd: no marker file)
        pod.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
        assert pci_scope(tmp_path) == "container"
    (tmp_path / "proc/self").mkdir(parents=True)
    for cgroup in ("12:pids:/kubepods/burstable/pod1/abc\n", "0::/system.slice/docker-0123abcd.scope\n"):
        (tmp_path / "proc/self/cgroup").write_text(cgroup)
        assert pci_scope(tmp_path) == "container"
    (tmp_path / "proc/self/cgroup").write_text("0::/user.slice/user-0.slice/session-1.scope\n")
    assert pci_scope(tmp_path) == "host"  # the control: a login session on the host
    (tmp_path / "proc/self/cgroup").write_text("0::/system.slice/slurmstepd.scope/job_42/step_0\n")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert pci_scope(tmp_path) == "job"
    gpus = tmp_path / "gpus"
    assert driver_gpus(gpus) is None
    (gpus / "0000:28:00.0").mkdir(parents=True)
    assert driver_gpus(gpus) == ["0000:28:00.0"]


# ---- 6. XIDs outlive the worker -----------------------------------------------------------


def test_xids_are_named_when_the_check_process_dies(fake_nvml_dir: Path) -> None:
    env = {**scenario_env(fake_nvml_dir, "xid"), "GPUENV_TEST_FAULT": "nvml:abort"}
    code, report, _ = verify_json("--check", "nvml", env=env)
    result = check(report, "nvml")
    assert code == 1 and result["status"] == "crash"
    xids = [(f["severity"], f["action"], f["gpu"]["index"]) for f in result["findings"] if f["item"] == "xid"]
    assert xids == [("fail", "drain", 2), ("warn", "monitor", 4)]  # XID 79 and 13, from the engine's watch


# ---- 7. compute mode ----------------------------------------------------------------------


def test_exclusive_process_mode_is_reported(fake_nvml_dir: Path) -> None:
    code, result = run_nvml(fake_nvml_dir, "exclusive-process")
    assert code == 0 and result["status"] == "pass"
    assert result["metrics"]["compute_modes"] == ["EXCLUSIVE_PROCESS"]
    reported = [f for f in result["findings"] if f["item"] == "compute_exclusive"]
    assert len(reported) == 8 and "EXCLUSIVE_PROCESS" in reported[0]["message"]


def test_prohibited_mode_fails() -> None:
    [finding] = gpu_findings({"index": 1, "compute_mode": 2}, load_policy())
    assert finding.item == "compute_prohibited" and finding.severity == "fail"


# ---- the engine's own probe: --check never adds checks ------------------------------------


def test_a_single_check_gets_the_gpus_from_the_engines_probe(fake_nvml_dir: Path) -> None:
    code, report, _ = verify_json("--check", "stack", env=scenario_env(fake_nvml_dir, "healthy-8xh100"))
    assert code == 1  # this torch is a CPU build on what NVML says is a GPU node
    assert [c["name"] for c in report["checks"]] == ["stack"]  # nvml was not added to name the GPUs
    assert [g["uuid"] for g in report["host"]["gpus"]][-1] == "GPU-00000000-0000-0000-0000-000000000007"
    assert report["stack"]["driver"] == "580.65.06"  # from the probe, not from an nvml check
    assert "probe" in report["timings"]
