"""The stack check on a ROCm torch, fed the facts an AMD node would report: the build's ROCm
release and HIP version, the amdgpu driver, the release against the knowledge base and each GPU's
gfx target against the build's gfx list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuenv.kb import load_kb
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from gpuenv.verify.checks.stack import amdgpu_version, evaluate, rocm_build

KB = load_kb()
MI300X = "AMD Instinct MI300X"


def rocm_facts(torch: str = "2.9.1+rocm6.4", *, gpus: list[dict[str, Any]], arch_list: list[str]) -> dict[str, Any]:
    return {
        "torch": torch,
        "torch_cuda": None,
        "torch_hip": "6.4.43482-0f2d60242",
        "amdgpu": "6.12.12",
        "python": "3.12",
        "torchvision": "0.24.1+rocm6.4",
        "cudnn": None,
        "nccl": "2.22.3",
        "arch_list": arch_list,
        "nvcc": None,
        "driver": "6.12.12",
        "gpus": gpus,
    }


def amd_gpus(name: str, gfx: str | None, count: int = 8) -> list[dict[str, Any]]:
    return [{"index": i, "cuda_index": i, "name": name, "compute_capability": None, "gfx": gfx} for i in range(count)]


def above_info(findings: list[Any]) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in findings if f.severity != "info"]


def test_what_resolve_recommends_for_an_mi300x_passes_and_says_the_build() -> None:
    stack = resolve(KB, Request(torch="2.9.1", rocm="6.4", gpu="MI300X", os="ubuntu24.04"))
    facts = rocm_facts(f"{stack.torch}+{stack.build}", gpus=amd_gpus(MI300X, "gfx942"), arch_list=[])
    facts["torchvision"] = stack.torchvision
    findings = evaluate(facts, KB, device="cuda")
    assert above_info(findings) == [], [f.message for f in findings]
    [build] = [f for f in findings if f.code == "stack.rocm-build"]
    assert build.message == ("torch 2.9.1+rocm6.4: ROCm build rocm6.4 (HIP 6.4.43482-0f2d60242), amdgpu driver 6.12.12")
    assert not any(f.code.startswith(("stack.no-cudnn", "stack.driver", "stack.cpu-only")) for f in findings)


def test_a_gpu_whose_gfx_the_build_lacks_fails_naming_it() -> None:
    # MI355X (gfx950) on a rocm6.4 build: torch's own arch list (gcnArchName form) has no gfx950
    gpus = amd_gpus("AMD Instinct MI355X", "gfx950:sramecc+:xnack-", count=2)
    facts = rocm_facts(gpus=gpus, arch_list=["gfx90a", "gfx942", "gfx1100"])
    findings = [f for f in evaluate(facts, KB, device="cuda") if f.severity == "fail"]
    assert [(f.code, f.action) for f in findings] == [("stack.arch-unsupported", "reinstall-stack")] * 2
    assert findings[1].message == (
        "GPU 1 (AMD Instinct MI355X, gfx950) is not supported by this torch build (gfx list gfx90a gfx942 gfx1100)"
    )


def test_without_torchs_arch_list_the_kb_gives_the_builds_gfx_list_and_the_gpus_gfx() -> None:
    gpus = amd_gpus("MI355X", None, count=1)  # no gfx read: the KB's amd_gpus table names it
    findings = evaluate(rocm_facts(gpus=gpus, arch_list=[]), KB, device="cuda")
    [failed] = [f for f in findings if f.severity == "fail"]
    assert failed.code == "stack.arch-unsupported" and "(MI355X, gfx950)" in failed.message
    assert "gfx942" in failed.message  # the KB's rocm6.4 list of torch 2.9.1


def test_a_rocm_release_the_kb_does_not_know_warns_and_the_gpus_are_still_judged() -> None:
    facts = rocm_facts("2.9.1+rocm9.9", gpus=amd_gpus(MI300X, "gfx942"), arch_list=["gfx942"])
    findings = evaluate(facts, KB, device="cuda")
    assert above_info(findings) == [("stack.rocm-not-in-kb", "warn")]
    assert "ROCm 9.9 of this torch is not in the knowledge base" in findings[1].message


def test_a_cpu_torch_on_an_amd_node_still_fails_as_cpu_only() -> None:
    facts = {**rocm_facts(gpus=amd_gpus(MI300X, "gfx942"), arch_list=[]), "torch_hip": None, "torch": "2.9.1+cpu"}
    assert [f.code for f in evaluate(facts, KB, device="cuda")] == ["stack.cpu-only-build"]


def test_the_build_and_the_driver_version() -> None:
    assert rocm_build("2.6.0+rocm6.2.4", "6.2.41133") == "rocm6.2.4"
    assert rocm_build("2.9.0a0+git1234", "6.4.43482") == "rocm6.4"  # a source build: HIP's release
    [said] = [f.message for f in evaluate({**rocm_facts(gpus=[], arch_list=[]), "amdgpu": None}, KB, device="cuda")]
    assert said.endswith("amdgpu driver 6.12.12")  # AMD SMI's, where sysfs has none


def test_amdgpu_version_reads_the_module_or_says_nothing(tmp_path: Path) -> None:
    version = tmp_path / "version"
    assert amdgpu_version(version) is None  # the inbox driver writes no version
    version.write_text("6.12.12\n")
    assert amdgpu_version(version) == "6.12.12"
