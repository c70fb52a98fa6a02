"""fleet compat's verdicts are resolve's: a sweep over every GPU model and every build of the knowledge base,
one over every driver branch, and for a stack installed on the host one over every build, Python and host OS
(resolve's for a pip install, provision's planner's for a pinned stack); then each rule's warn, fail and healthy
control on the pure judge."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gpuenv.errors import BadRequest
from gpuenv.fleet.compat_rules import HostKind, Judge
from gpuenv.fleet.source import OnHost
from gpuenv.kb import KnowledgeBase, forward_compat, in_cuda_image, load_kb, parse_kb
from gpuenv.provision.hostfacts import GatheredGpu, GatheredHost
from gpuenv.provision.perhost import HostRequest, plan_hosts
from gpuenv.resolve.request import Request
from gpuenv.resolve.service import _resolve, resolve
from gpuenv.resources import data_file
from gpuenv.stack import Stack

KB = load_kb(None)
NEWEST_DRIVER = max((b.latest for b in KB.driver_branches if b.latest), key=lambda d: tuple(map(int, d.split("."))))


def builds(kb: KnowledgeBase) -> list[tuple[str, Stack]]:
    """Every (torch release, build) of the knowledge base that resolves for a host, with its stack."""
    out = []
    for torch in kb.torch:
        made = kb.rocm_builds(torch.version)
        for build in (*torch.builds, *(made.arch if made else ())):
            try:
                out.append((f"{torch.version}+{build}", resolve(kb, Request(torch=f"{torch.version}+{build}"))))
            except BadRequest:
                continue
    return out


def resolves(stack: Stack, gpu: str | None, driver: str | None) -> bool:
    asked = Request(
        torch=f"{stack.torch}+{stack.build}",
        gpu=gpu,
        driver=driver,
        os=stack.os,
        python=stack.python,
        cpu_arch=stack.cpu_arch,
    )
    try:
        _resolve(KB, asked, explain=False)  # resolve's own rules, without working out the hints of a refusal
    except BadRequest:
        return False
    return True


def models(kb: KnowledgeBase) -> list[tuple[str, str, bool, str]]:
    """Every GPU model: (name, its code as --gpu spells it, whether it takes an NVIDIA driver, the CPU
    architecture of its hosts: Grace's aarch64 for a GH200, x86_64 where the KB names none)."""
    nvidia = [(g.name, f"sm_{g.sm.replace('.', '')}", True, g.cpu_arch or "x86_64") for g in kb.gpus]
    return nvidia + [(g.name, g.gfx, False, "x86_64") for g in kb.amd_gpus]


def test_every_gpu_model_and_build_gets_the_verdict_resolve_gives() -> None:
    compared = 0
    for pinned, stack in builds(KB):
        judge = Judge(KB, stack, OnHost())  # installed on the host, as resolve's Request is for
        for name, code, takes_driver, arch in models(KB):
            verdict = judge.host(HostKind(((name, code),), NEWEST_DRIVER, arch))
            expected = resolves(stack, name, NEWEST_DRIVER if takes_driver else None)
            assert (verdict.state in ("runs", "caveat")) == expected, (pinned, name, verdict)
            compared += 1
    assert compared > 1000


def test_every_driver_branch_and_cuda_build_gets_the_verdict_resolve_gives() -> None:
    drivers = [b.latest for b in KB.driver_branches if b.latest] + ["450.80.02", "525.60.13"]
    for pinned, stack in builds(KB):
        if stack.platform != "cuda":
            continue
        judge = Judge(KB, stack, OnHost())
        for driver in drivers:
            verdict = judge.host(HostKind((("H100", "sm_90"),), driver, "x86_64"))
            expected = resolves(stack, "H100", driver) if resolves(stack, "H100", None) else False
            assert (verdict.state in ("runs", "caveat")) == expected, (pinned, driver, verdict)


HOST_OSES = [o.name for o in KB.os if "host" in o.roles]
# A GPU of each platform, as provision's gather pass and a verify report name it; None: the CPU build's host.
GPU_OF = {
    "cuda": (GatheredGpu("2330", "H100", "H100", "9.0", "cuda", "H100 (sm_90)"), "sm_90", NEWEST_DRIVER),
    "rocm": (GatheredGpu("74a1", "MI300X", "MI300X", "gfx942", "rocm", "MI300X (gfx942)"), "gfx942", None),
}


def host_stacks() -> list[Stack]:
    """Every build with every Python its torch has wheels for, resolved for the default OS where it gives it,
    that runs on its platform's GPU above (or, for the CPU build, on a host without one)."""
    out = []
    for pinned, made in builds(KB):
        for python in next(t for t in KB.torch if t.version == made.torch).python:
            try:
                stack = resolve(KB, Request(torch=pinned, python=python))
            except BadRequest:
                continue
            gpu = GPU_OF.get(stack.platform)
            if gpu is None or resolves(stack, gpu[1], gpu[2]):
                out.append(stack)
    return out


def host_kind(stack: Stack, os: str) -> HostKind:
    gpu = GPU_OF.get(stack.platform)
    gpus = ((gpu[0].name, gpu[1]),) if gpu else ()
    return HostKind(gpus, gpu[2] if gpu else None, stack.cpu_arch, os, stack.python)


def test_every_build_python_and_host_os_gets_the_verdict_resolve_gives_a_pip_install() -> None:
    compared, seen = 0, set()
    for stack in host_stacks():
        judge = Judge(KB, stack, OnHost(stack.os, stack.python, by_pip=True))
        gpu = GPU_OF.get(stack.platform)
        for os in HOST_OSES:
            verdict = judge.host(host_kind(stack, os))
            expected = resolves(replace(stack, os=os), gpu[1] if gpu else None, gpu[2] if gpu else None)
            assert (verdict.state in ("runs", "caveat")) == expected, (stack.torch, stack.build, os, verdict)
            compared, seen = compared + 1, seen | {verdict.state}
    assert compared > 1000 and seen == {"runs", "caveat", "no"}


def test_every_build_python_and_host_os_gets_the_verdict_provision_gives_a_pinned_stack() -> None:
    compared, refused = 0, set()
    for stack in host_stacks():
        judge = Judge(KB, stack, OnHost(stack.os, stack.python))
        gpu = GPU_OF.get(stack.platform)
        for os in HOST_OSES:
            info = KB.os_by_name[os]
            assert info.ansible is not None
            gpus = (gpu[0],) if gpu else ()
            facts = GatheredHost(
                "h", info.ansible.distribution, info.version, os, stack.cpu_arch, "6.8", True, gpus=gpus
            )
            plan = plan_hosts(KB, HostRequest(pinned=stack), [facts])[0]
            verdict = judge.host(host_kind(stack, os))
            assert (verdict.state in ("runs", "caveat")) == (plan.refused is None), (stack.build, os, verdict, plan)
            compared, refused = compared + 1, refused | {verdict.constraints[0] if verdict.state == "no" else ""}
    assert compared > 1000 and refused == {"", "os", "python"}  # an OS provision's roles do not serve, a Python


def test_an_image_over_every_gpu_model_driver_branch_and_cuda_build_gets_resolves_verdict_then_cuda_compats() -> None:
    """An image's verdict is resolve's, then its nvidia/cuda base's cuda-compat over it (one rule: in_cuda_image)."""
    newest = {stack.build: (pinned, stack) for pinned, stack in builds(KB) if stack.platform == "cuda"}
    drivers = [b.latest for b in KB.driver_branches if b.latest]
    seen: dict[str, int] = {}
    for pinned, stack in newest.values():
        image = Judge(KB, stack)
        for gpu in KB.gpus:
            if (gpu.cpu_arch or "x86_64") != stack.cpu_arch or not resolves(stack, gpu.name, None):
                continue
            for driver in drivers:
                verdict = image.host(HostKind(((gpu.name, f"sm_{gpu.sm.replace('.', '')}"),), driver, stack.cpu_arch))
                forward = forward_compat(KB, stack.build, driver, gpu)
                fate, runs = in_cuda_image(forward), resolves(stack, gpu.name, driver)
                expected = fate[0] if fate else ("runs" if runs else "no")
                assert (verdict.state == "no") == (expected == "no"), (pinned, gpu.name, driver, verdict)
                if fate and (fate[0] == "caveat" or runs):  # where the image's cuda-compat decides, it is named
                    assert any(forward.package in r for r in verdict.reasons), (pinned, gpu.name, driver, verdict)
                seen[expected] = seen.get(expected, 0) + 1
    assert set(seen) == {"runs", "caveat", "no"} and seen["caveat"] > 100, seen


IMAGE_CU128 = "2.7.0+cu128"


@pytest.mark.parametrize(
    ("gpus", "driver", "state", "said"),
    [
        ((("NVIDIA H100", "sm_90"),), "570.124.06", "runs", None),  # control
        ((("NVIDIA H100", "sm_90"),), "535.104.05", "caveat", "cuda-compat-12-8 runs CUDA 12.8.1 on R535"),
        ((("NVIDIA GeForce RTX 4090", "sm_89"),), "535.104.05", "no", "forward compatibility is for NVIDIA data"),
        ((("NVIDIA GeForce RTX 4090", "sm_89"),), "570.124.06", "runs", None),
        ((("NVIDIA H100", "sm_90"),), "550.54.15", "caveat", "minor-version compatibility in use"),  # R550: EOL
        ((("NVIDIA A100-SXM4-80GB", "sm_80"),), "470.256.02", "no", "below 525.60.13"),
    ],
)
def test_the_forward_compatibility_rule_of_an_image(
    gpus: tuple[tuple[str, str], ...], driver: str, state: str, said: str | None
) -> None:
    verdict = Judge(KB, resolve(KB, Request(torch=IMAGE_CU128))).host(HostKind(gpus, driver, "x86_64"))
    assert verdict.state == state and (said is None or any(said in r for r in verdict.reasons)), verdict


def test_a_host_stack_on_an_older_branch_does_not_run_until_cuda_compat_is_installed_and_is_told_which() -> None:
    cu130 = resolve(KB, Request(torch="2.9.0+cu130"))
    host = Judge(KB, cu130, OnHost()).host(HostKind(H100, "535.104.05", "x86_64"))
    assert host.state == "no" and "cuda-compat-13-0 runs CUDA 13.0.3 on R535" in host.reasons[0]
    image = Judge(KB, cu130).host(HostKind(H100, "535.104.05", "x86_64"))
    assert image.state == "caveat" and "runs through CUDA forward compatibility" in image.reasons[0]
    rtx = Judge(KB, cu130, OnHost()).host(HostKind((("RTX 4090", "sm_89"),), "535.104.05", "x86_64"))
    assert rtx.state == "no" and "below 580.65.06" in rtx.reasons[0]


def judge(torch: str = "2.7.0+cu128", kb: KnowledgeBase = KB) -> Judge:
    return Judge(kb, resolve(kb, Request(torch=torch)))


H100 = (("NVIDIA H100", "sm_90"),)


@pytest.mark.parametrize(
    ("kind", "state", "said"),
    [
        (HostKind(H100, "570.124.06", "x86_64"), "runs", None),  # control
        (HostKind(H100, "535.104.05", "x86_64"), "caveat", "minor-version compatibility in use"),
        (HostKind(H100, "470.256.02", "x86_64"), "no", "below 525.60.13"),
        (HostKind(H100, None, "x86_64"), "unknown", "does not give the driver"),
    ],
)
def test_the_driver_rule(kind: HostKind, state: str, said: str | None) -> None:
    verdict = judge().host(kind)
    assert verdict.state == state and (said is None or said in verdict.reasons[0])


@pytest.mark.parametrize(
    ("gpus", "state", "said"),
    [
        ((("B200", "sm_100"),), "runs", None),  # control
        ((("V100", "sm_70"),), "no", "no kernel for Volta sm_70"),
        ((("B200", "sm_100"), ("V100", "sm_70")), "no", "no kernel for Volta sm_70"),  # a mixed node: every GPU
        ((("MI300X", "gfx942"),), "no", "needs NVIDIA GPUs"),
        ((("future", "sm_130"),), "unknown", "unknown compute capability"),
        ((), "unknown", "names no GPU"),
    ],
)
def test_the_gpu_code_rule(gpus: tuple[tuple[str, str], ...], state: str, said: str | None) -> None:
    verdict = judge().host(HostKind(gpus, "580.65.06", "x86_64"))
    assert verdict.state == state and (said is None or said in verdict.reasons[0])


def test_ptx_jit_is_a_caveat_with_its_cost() -> None:
    """No build of the shipped knowledge base reaches a GPU only through PTX: one edited to do so."""
    data = json.loads(data_file("compat.json").read_text())
    row = next(t for t in data["torch"] if t["version"] == "2.7.0")
    row["arch"]["cu128"] = "7.5;8.0;8.6;8.9+PTX"
    kb = parse_kb(data)
    verdict = judge(kb=kb).host(HostKind(H100, "570.124.06", "x86_64"))
    assert verdict.state == "caveat" and "only through PTX JIT" in verdict.reasons[0]
    assert judge(kb=kb).host(HostKind((("L4", "sm_89"),), "570.124.06", "x86_64")).state == "runs"


def test_a_cpu_build_runs_beside_any_gpu_with_a_caveat() -> None:
    cpu = judge("2.7.0+cpu")
    assert cpu.host(HostKind(H100, "470.256.02", "x86_64")).state == "caveat"
    assert cpu.host(HostKind((), None, "x86_64")).state == "runs"
    assert cpu.host(HostKind((), None, "riscv64")).state == "unknown"


def test_a_stack_the_knowledge_base_does_not_know_is_a_bad_request() -> None:
    stack = resolve(KB, Request(torch="2.7.0+cu128"))
    with pytest.raises(BadRequest, match="not in the knowledge base"):
        Judge(KB, replace(stack, torch="9.9.9"))
    with pytest.raises(BadRequest, match="not in the knowledge base"):
        Judge(KB, replace(stack, build="cu130"))
