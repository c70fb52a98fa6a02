"""The stack check's evaluation, fed the facts a node would report."""

from __future__ import annotations

from typing import Any

import pytest

from gpuenv.kb import load_kb
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from gpuenv.verify.checks.stack import evaluate

KB = load_kb()
ARCH_CU12 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


def facts_for(stack: Any, *, driver: str, sm: str, arch_list: list[str]) -> dict[str, Any]:
    return {
        "torch": f"{stack.torch}+{stack.build}",
        "torch_cuda": ".".join(stack.cuda.split(".")[:2]),
        "python": stack.python,
        "torchvision": stack.torchvision,
        "cudnn": 90100,
        "nccl": "2.21.5",
        "arch_list": arch_list,
        "nvcc": None,
        "driver": driver,
        "gpus": [{"cuda_index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_capability": sm}],
    }


def severities(findings: list[Any]) -> list[str]:
    return [f.severity for f in findings if f.severity != "info"]


@pytest.mark.parametrize("driver_of", ["driver_min", "driver_floor"])
def test_what_resolve_recommends_passes(driver_of: str) -> None:
    stack = resolve(KB, Request(gpu="H100", driver="535.104.05"))
    driver = getattr(stack, driver_of)
    findings = evaluate(facts_for(stack, driver=driver, sm="9.0", arch_list=ARCH_CU12), KB, device="cuda")
    assert severities(findings) == [], [f.message for f in findings]
    assert any(f.item == "driver" for f in findings)  # the driver verdict is reported, as info


def test_driver_below_the_floor_fails_with_the_resolvers_words() -> None:
    stack = resolve(KB, Request(gpu="H100", driver="535.104.05"))
    findings = evaluate(facts_for(stack, driver="450.80.02", sm="9.0", arch_list=ARCH_CU12), KB, device="cuda")
    assert [(f.item, f.severity, f.action) for f in findings if f.severity == "fail"] == [
        ("driver", "fail", "reinstall-driver")
    ]
    assert "450.80.02" in findings[0].message


def test_cpu_only_torch_on_a_gpu_node_fails() -> None:
    stack = resolve(KB, Request(gpu="H100", driver="535.104.05"))
    facts = {**facts_for(stack, driver="535.104.05", sm="9.0", arch_list=[]), "torch_cuda": None}
    [finding] = evaluate(facts, KB, device="cuda")
    assert finding.severity == "fail" and "CPU-only" in finding.message


def test_a_cu118_torch_on_an_sm120_gpu_fails_naming_the_gpu() -> None:
    stack = resolve(KB, Request(cuda="11.8"))
    findings = evaluate(facts_for(stack, driver="580.65.06", sm="12.0", arch_list=ARCH_CU12), KB, device="cuda")
    arch = [f for f in findings if f.item == "arch"]
    assert [f.severity for f in arch] == ["fail"] and "sm_120" in arch[0].message and "GPU 0" in arch[0].message


def test_a_cu13_torch_on_a_v100_fails() -> None:
    stack = resolve(KB, Request(cuda="13.0"))
    arch_list = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    findings = evaluate(facts_for(stack, driver="580.65.06", sm="7.0", arch_list=arch_list), KB, device="cuda")
    assert [f.severity for f in findings if f.item == "arch"] == ["fail"]


@pytest.mark.parametrize("sm", ["8.9", "10.3"])
def test_a_same_major_cubin_is_support(sm: str) -> None:
    """sm_89 runs sm_86 cubins and sm_103 runs sm_100 cubins: no finding."""
    stack = resolve(KB, Request(cuda="12.8"))
    arch_list = ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    findings = evaluate(facts_for(stack, driver="580.126.20", sm=sm, arch_list=arch_list), KB, device="cuda")
    assert [f for f in findings if f.item == "arch"] == []


def test_ptx_only_support_warns() -> None:
    stack = resolve(KB, Request(gpu="H100", driver="580.65.06"))
    facts = facts_for(stack, driver="580.65.06", sm="10.0", arch_list=[*ARCH_CU12, "compute_90"])
    assert [f.severity for f in evaluate(facts, KB, device="cuda") if f.item == "arch"] == ["warn"]


def test_mismatched_torchvision_fails_and_nvcc_mismatch_warns() -> None:
    stack = resolve(KB, Request(gpu="H100", driver="580.65.06"))
    facts = {
        **facts_for(stack, driver="580.65.06", sm="9.0", arch_list=ARCH_CU12),
        "torchvision": "0.1.0",
        "nvcc": "11.8",
    }
    items = {f.item: f.severity for f in evaluate(facts, KB, device="cuda")}
    assert items["torchvision"] == "fail" and items["nvcc"] == "warn"


def test_cpu_path_judges_only_versions() -> None:
    facts = {"torch": "2.13.0+cpu", "torch_cuda": None, "python": "3.11", "torchvision": None}
    assert severities(evaluate(facts, KB, device="cpu")) == []


@pytest.mark.parametrize(
    ("torch", "cpu_arch", "said"),
    [
        (
            "2.9.1+cpu",
            "aarch64",
            "PyPI's plain torch 2.9.1 for aarch64 is a CPU build: its CUDA wheels for aarch64 are on",
        ),
        ("2.5.1", "aarch64", "PyPI's plain torch 2.5.1 for aarch64 is a CPU build"),
        ("2.3.1", "aarch64", "torch 2.3.1 publishes no CUDA wheels for aarch64"),
        ("2.9.1+cpu", "x86_64", "its CUDA wheels for x86_64 are on https://download.pytorch.org/whl/cu128 ("),
    ],
)
def test_a_cpu_only_torch_names_the_index_of_the_nodes_architecture(torch: str, cpu_arch: str, said: str) -> None:
    """The PyPI trap: on aarch64 `pip install torch` was a CPU build through 2.10; the finding names the right index."""
    stack = resolve(KB, Request(gpu="GH200"))
    facts = {**facts_for(stack, driver="580.65.06", sm="9.0", arch_list=[]), "torch": torch, "torch_cuda": None}
    [finding] = evaluate({**facts, "cpu_arch": cpu_arch}, KB, device="cuda")
    assert finding.severity == "fail" and said in finding.message, finding.message
    if cpu_arch == "aarch64" and torch.startswith("2.9"):
        assert "/whl/cu130 (cu126, cu128, cu130)" in finding.message  # the aarch64 builds, newest first named


def test_a_cuda_torch_on_an_aarch64_node_is_not_flagged() -> None:
    stack = resolve(KB, Request(gpu="GH200", torch="2.9"))
    facts = facts_for(stack, driver=stack.driver_min, sm="9.0", arch_list=["sm_80", "sm_90", "sm_100", "sm_120"])
    findings = evaluate({**facts, "cpu_arch": "aarch64"}, KB, device="cuda")
    assert severities(findings) == [], [f.message for f in findings]
