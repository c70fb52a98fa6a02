"""The Slurm hooks on an AMD node: the job's GPUs reach verify as ROCR_VISIBLE_DEVICES (HIP's and
CUDA's variables removed, since they would pick among the ROCR list), and AMD SMI's passive reader
then judges exactly those GPUs; an NVIDIA node keeps CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpuenv.platforms import nodes
from gpuenv.slurm import core, service
from gpuenv.slurm.service import HookRequest
from gpuenv.verify.pci import TEST_SYSFS_ENV
from tests.verify.conftest import verify_json
from tests.verify.test_amdsmi import FAKE_AMDSMI, fake_sysfs

PROLOG = HookRequest(hook="prolog", level="quick", max_time=60)


def test_an_nvidia_job_keeps_cuda_visible_devices() -> None:
    assert core.job_gpu_env({"SLURM_JOB_GPUS": "4,5"}, nodes.GPU_NODES[0]) == {"CUDA_VISIBLE_DEVICES": "4,5"}
    assert core.job_gpu_env({"CUDA_VISIBLE_DEVICES": "2,3", "SLURM_JOB_GPUS": "0"}, nodes.GPU_NODES[0]) == {
        "CUDA_VISIBLE_DEVICES": "2,3"
    }
    assert core.job_gpu_env({}, nodes.GPU_NODES[0]) == {} and core.job_gpu_env({}, nodes.GPU_NODES[1]) == {}


@pytest.mark.parametrize(
    ("env", "gpus"),
    [
        ({"SLURM_JOB_GPUS": "2,3"}, "2,3"),
        ({"ROCR_VISIBLE_DEVICES": "4,5", "SLURM_JOB_GPUS": "4,5"}, "4,5"),
        # Slurm sets CUDA_VISIBLE_DEVICES for any GPU gres: without ROCR it is absolute, as HIP reads it
        ({"CUDA_VISIBLE_DEVICES": "6", "SLURM_JOB_GPUS": "6"}, "6"),
        ({"SLURM_STEP_GPUS": "1"}, "1"),
    ],
)
def test_an_amd_job_is_mapped_through_rocr_visible_devices(env: dict[str, str], gpus: str) -> None:
    assert core.job_gpu_env(env, nodes.GPU_NODES[1]) == {
        "ROCR_VISIBLE_DEVICES": gpus,
        "HIP_VISIBLE_DEVICES": None,
        "CUDA_VISIBLE_DEVICES": None,
    }


def _bus(tmp_path: Path, vendor: str) -> Path:
    return fake_sysfs(tmp_path / vendor, {"0000:05:00.0": (vendor, "0x030200"), "0000:15:00.0": (vendor, "0x030200")})


def test_the_hook_chooses_the_variables_by_the_gpus_on_the_bus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_GPUS", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv(TEST_SYSFS_ENV, str(_bus(tmp_path, "0x1002")))
    amd = service._verify_env(PROLOG)
    assert amd["ROCR_VISIBLE_DEVICES"] == "1" and "CUDA_VISIBLE_DEVICES" not in amd
    monkeypatch.setenv(TEST_SYSFS_ENV, str(_bus(tmp_path, "0x10de")))
    nvidia = service._verify_env(PROLOG)
    assert nvidia["CUDA_VISIBLE_DEVICES"] == "1" and "ROCR_VISIBLE_DEVICES" not in nvidia
    health = service._verify_env(HookRequest(hook="health-check", level="quick", max_time=60))
    assert health["CUDA_VISIBLE_DEVICES"] == "1"  # the health check is the node's: nothing narrowed


def verify_as_the_hook_runs_it(monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict[str, Any], dict[str, str]]:
    """`verify --check nvml --passive` in exactly the environment the prolog gives it (the hook's
    own environment less what it removed)."""
    env = service._verify_env(PROLOG)
    with monkeypatch.context() as inner:
        for name in set(os.environ) - set(env):
            inner.delenv(name)
        code, report, _ = verify_json("--check", "nvml", "--passive", env=env)
    return code, report, env


def test_amd_smi_reads_the_jobs_gpus_only(
    fake_rocm: Path, amd_sysfs: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """GPUs 2 and 3 of eight MI300X given to the job; GPU 5's XGMI link is down, but it is not the job's."""
    for name, value in {
        "SLURM_JOB_GPUS": "2,3",
        # Slurm's gres sets both for an AMD GPU, each absolute: HIP would pick CUDA's list among ROCR's
        "ROCR_VISIBLE_DEVICES": "2,3",
        "CUDA_VISIBLE_DEVICES": "2,3",
        TEST_SYSFS_ENV: str(amd_sysfs),
        "ROCM_PATH": str(fake_rocm),
        "FAKE_AMDSMI_SCENARIO": str(FAKE_AMDSMI / "xgmi-down.scenario"),
        "LD_LIBRARY_PATH": "",
    }.items():
        monkeypatch.setenv(name, value)
    code, report, _ = verify_as_the_hook_runs_it(monkeypatch)
    assert [g["index"] for g in report["host"]["gpus"]] == [2, 3]
    assert [g["cuda_index"] for g in report["host"]["gpus"]] == [0, 1]  # what the job's torch calls them
    assert code == 0, report  # GPU 5's fault is another job's node state, not this job's GPUs

    for name in ("SLURM_JOB_GPUS", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.setenv(name, "4,5")
    code, report, env = verify_as_the_hook_runs_it(monkeypatch)
    failed = [f for c in report["checks"] for f in c["findings"] if f["severity"] == "fail"]
    assert code == 1 and [f["gpu"]["index"] for f in failed] == [5]

    # the epilog's kernel-log XIDs are NVIDIA's: on an AMD node it says so, and reads nothing
    path = tmp_path / "epilog.json"
    path.write_text(json.dumps(report))
    loaded = service._load(path)
    assert loaded is not None
    found, note = service.job_kernel_xids(loaded, env, kmsg=tmp_path / "no-kmsg")
    assert found == [] and note is not None and "XIDs are NVIDIA's" in note
