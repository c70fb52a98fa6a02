"""Provision resolves a ROCm stack on AMD hosts from flags, as it resolves a CUDA stack on NVIDIA hosts.

An AMD host's stack comes from its GPUs (model and gfx target, from the knowledge base's device ids) and
the request's --torch/--rocm/--python; several gfx targets need one build that carries them all. --cuda
on AMD GPUs and --rocm on NVIDIA GPUs are refused naming the host and what was found. The OS rule is
resolve's (Rocky Linux where AMD lists RHEL) narrowed to what the amdgpu role implements. Pure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuenv.kb import load_kb
from gpuenv.platforms.rocm.oses import rocm_host_oses, rocm_os_line
from gpuenv.provision.driverplan import driver_plans
from gpuenv.provision.hostfacts import GatheredHost
from gpuenv.provision.perhost import HostPlan, HostRequest, plan_hosts, request_from, wheelhouse_torch
from gpuenv.provision.variables import ProvisionOptions
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from gpuenv.stack_service import load_stack
from tests.conftest import run_gpuenv
from tests.provision.amd import H100, MI250X, MI300X, amd, host_facts, nvidia

KB = load_kb()
MI355X = ("75a3", "120000", "AMD Instinct MI355X")
MI325X = ("74a5", "120000", "AMD Instinct MI325X")
UNKNOWN = ("7777", "120000", "AMD device")


def _one(request: HostRequest, facts: GatheredHost) -> HostPlan:
    (plan,) = plan_hosts(KB, request, [facts])
    return plan


def _asks(**constraints: Any) -> HostRequest:
    return HostRequest(constraints=Request(**constraints))


def test_an_mi300x_host_with_rocm_6_4_gets_rocm6_4_for_gfx942_and_the_amdgpu_role() -> None:
    facts = host_facts(KB, "mi1", "Ubuntu", "24.04", *amd(MI300X, 8))
    plan = _one(_asks(torch="2.9.1", rocm="6.4"), facts)
    assert plan.refused is None and plan.stack is not None
    stack = plan.stack
    assert (stack.torch, stack.torchvision, stack.build, stack.rocm) == ("2.9.1", "0.24.1", "rocm6.4", "6.4")
    assert (stack.gpu_gfx, stack.arch_list, stack.os, stack.driver_branch) == (
        "gfx942",
        "gfx942",
        "ubuntu24.04",
        "amdgpu-6.4",
    )
    assert stack == resolve(KB, Request(torch="2.9.1", rocm="6.4", gpu="MI300X", os="ubuntu24.04"))
    driver = driver_plans(KB, ProvisionOptions(), (plan,))["mi1"]
    assert (driver["action"], driver["rocm"], driver["os"]) == ("install", "6.4", "ubuntu2404")


def test_without_flags_an_amd_host_gets_the_rocm_stack_its_gpu_would_resolve() -> None:
    facts = host_facts(KB, "mi1", "Ubuntu", "22.04", *amd(MI300X, 8))
    plan = _one(HostRequest(), facts)
    assert plan.stack == resolve(KB, Request(gpu="MI300X", os="ubuntu22.04"))
    assert plan.stack is not None and plan.stack.platform == "rocm"


def test_a_gpu_check_names_the_model_or_the_gfx_target() -> None:
    facts = host_facts(KB, "mi1", "Ubuntu", "24.04", *amd(MI300X, 8))
    for gpu in ("MI300X", "gfx942", "AMD Instinct MI300X"):
        assert _one(HostRequest(gpu_check=gpu, constraints=Request(rocm="6.4")), facts).stack is not None, gpu
    refused = _one(HostRequest(gpu_check="MI250X"), facts).refused
    assert refused == "the host has 8× MI300X (gfx942), --gpu asks for MI250X"
    assert _one(HostRequest(gpu_check="gfx90a"), facts).refused is not None


def test_a_host_with_several_gfx_targets_gets_one_build_that_carries_them_all() -> None:
    facts = host_facts(KB, "mix", "Ubuntu", "22.04", *amd(MI250X, 4), *amd(MI300X, 4))
    stack = _one(_asks(rocm="6.4"), facts).stack
    assert stack is not None and (stack.build, stack.arch_list, stack.gpu_gfx) == (
        "rocm6.4",
        "gfx90a;gfx942",
        None,
    )
    assert stack.reasons["gpu"].startswith("a mixed node: torch 2.9.1+rocm6.4 runs on MI250X (gfx90a), MI300X (gfx942)")
    newest = _one(HostRequest(), host_facts(KB, "m", "Ubuntu", "22.04", *amd(MI250X, 4), *amd(MI355X, 4))).stack
    assert newest is not None and newest.arch_list == "gfx90a;gfx950" and str(newest.rocm).startswith("7.")


def test_each_gpus_first_rocm_decides_within_one_gfx_target() -> None:
    facts = host_facts(KB, "m", "Ubuntu", "22.04", *amd(MI300X, 4), *amd(MI325X, 4))
    refused = _one(_asks(torch="2.6"), facts).refused  # 2.6 is built for rocm6.1 and rocm6.2.4; MI325X needs 6.3
    assert refused == (
        "no one stack runs on all of this host's GPUs (MI300X, MI325X): "
        "torch 2.6.0+rocm6.2.4 is ROCm 6.2.4, and MI325X needs ROCm ≥ 6.3"
    )
    stack = _one(_asks(torch="2.8"), facts).stack
    assert stack is not None and stack.build in ("rocm6.3", "rocm6.4") and stack.gpu_gfx == "gfx942"


@pytest.mark.parametrize(
    ("gpus", "request_", "said"),
    [
        (amd(MI355X, 8), _asks(rocm="6.4"), "--gpu MI355X: MI355X (gfx950) needs ROCm ≥ 7.0, and rocm6.4 is ROCm 6.4"),
        (
            amd(MI300X, 4) + amd(MI355X, 4),
            _asks(torch="2.9.1"),
            "no one stack runs on all of this host's GPUs (MI300X, MI355X): torch 2.9.1+rocm6.4 has no GPU code for "
            "MI355X (gfx950)",
        ),
    ],
)
def test_gpus_no_stack_serves_are_refused_with_the_reason(gpus: Any, request_: HostRequest, said: str) -> None:
    refused = _one(request_, host_facts(KB, "m", "Ubuntu", "22.04", *gpus)).refused
    assert refused is not None and said in refused


def test_cuda_on_amd_gpus_and_rocm_on_nvidia_gpus_are_refused_naming_the_host_and_the_gpus() -> None:
    mi300x = host_facts(KB, "mi1", "Ubuntu", "24.04", *amd(MI300X, 8))
    h100 = host_facts(KB, "nv1", "Ubuntu", "24.04", *nvidia(H100, 8))
    plans = {p.host: p.refused for p in plan_hosts(KB, _asks(rocm="6.4"), [mi300x, h100])}
    assert plans == {
        "mi1": None,
        "nv1": "nv1: --rocm 6.4 asks for a ROCm stack, which needs AMD Instinct GPUs, but the host has 8× H100 (sm_90)",
    }
    plans = {p.host: p.refused for p in plan_hosts(KB, _asks(torch="2.6.0+cu124"), [mi300x, h100])}
    assert plans == {
        "mi1": "mi1: --torch 2.6.0+cu124 asks for a CUDA stack, which needs NVIDIA GPUs, but the host has 8× MI300X "
        "(gfx942)",
        "nv1": None,
    }
    refused = _one(_asks(torch="2.6.0+rocm6.2.4"), h100).refused
    assert refused is not None and refused.startswith("nv1: --torch 2.6.0+rocm6.2.4 asks for a ROCm stack")


def test_rocky_linux_is_provisioned_where_amd_lists_rhel_with_a_warning() -> None:
    plan = _one(_asks(rocm="6.4"), host_facts(KB, "r9", "Rocky", "9.4", *amd(MI300X, 8)))
    assert plan.stack is not None and (plan.stack.os, plan.stack.build) == ("rockylinux9", "rocm6.4")
    assert any(w.startswith("AMD lists ROCm 6.4 for RHEL 9, not rockylinux9") for w in plan.warnings)
    assert driver_plans(KB, ProvisionOptions(), (plan,))["r9"]["family"] == "rhel"
    refused = _one(_asks(rocm="7.0"), host_facts(KB, "r8", "Rocky", "8.10", *amd(MI300X, 8))).refused
    assert refused is not None and "AMD supports ROCm 7.0 on" in refused and "not rockylinux8" in refused


def test_debian_is_refused_for_provisioning_though_amd_supports_it() -> None:
    facts = host_facts(KB, "d", "Debian", "12", *amd(MI300X, 8))
    assert resolve(KB, Request(rocm="6.4", os="debian12")).build == "rocm6.4"  # resolve allows it
    assert _one(_asks(rocm="6.4"), facts).refused == (
        "ROCm 6.4 is not provisioned on debian12: the amdgpu role does not implement it "
        "(gpuenv provisions it on Ubuntu 22.04/24.04, Rocky Linux 8/9)"
    )


def test_the_oses_a_rocm_release_is_provisioned_on_come_from_its_knowledge_base_row() -> None:
    assert rocm_host_oses(KB, "6.4") == {"ubuntu": ["22.04", "24.04"], "rocky": ["8", "9"]}
    assert rocm_host_oses(KB, "7.0") == {"ubuntu": ["22.04", "24.04"], "rocky": ["9"]}  # AMD lists rhel9 only
    assert rocm_os_line(KB, "7.0") == "Ubuntu 22.04/24.04, Rocky Linux 9"
    assert rocm_host_oses(KB, "6.0") == {"ubuntu": ["22.04"], "rocky": ["8", "9"]}  # no 24.04 before 6.2


def test_unknown_amd_gpus_need_rocm_given_and_hosts_alike_share_one_resolution() -> None:
    unknown = host_facts(KB, "u", "Ubuntu", "24.04", *amd(UNKNOWN, 2))
    plan = _one(HostRequest(), unknown)
    assert plan.refused == "u: no AMD GPU the knowledge base knows (2× unknown 1002:7777): give --rocm X.Y"
    given = _one(_asks(rocm="6.4"), unknown)
    assert given.stack is not None and given.stack.gpu_gfx is None
    assert "unknown AMD device 1002:7777: not in the device-id table" in given.warnings
    a, b = plan_hosts(KB, HostRequest(), [host_facts(KB, h, "Ubuntu", "24.04", *amd(MI300X, 8)) for h in "ab"])
    assert a.stack is b.stack


def test_a_rocm_wheelhouse_asks_for_its_rocm_build() -> None:
    wheels = wheelhouse_torch(
        ["torch-2.9.1+rocm6.4-cp312-cp312-manylinux_2_28_x86_64.whl", "torchvision-0.24.1+rocm6.4-cp312-cp312-x.whl"]
    )
    assert (wheels.torch, wheels.build, wheels.python) == ("2.9.1", "rocm6.4", "3.12")
    request, notes = request_from(Request(), wheels=wheels, skip_driver=False, pinned=None)
    assert (request.constraints.torch, request.constraints.rocm, request.constraints.cuda) == ("2.9.1", "rocm6.4", None)
    assert notes == ["from the wheelhouse: torch 2.9.1+rocm6.4, Python 3.12"]
    stack = _one(request, host_facts(KB, "mi1", "Ubuntu", "24.04", *amd(MI300X, 8))).stack
    assert stack is not None and (stack.build, stack.python) == ("rocm6.4", "3.12")


def test_a_resolved_rocm_stack_file_round_trips_through_provision(tmp_path: Path) -> None:
    resolved = run_gpuenv("resolve", "--torch", "2.9.1", "--rocm", "6.4", "--os", "ubuntu24.04", "--json")
    assert resolved.returncode == 0, resolved.stderr
    stack_file = tmp_path / "stack.json"
    stack_file.write_text(resolved.stdout, encoding="utf-8")
    pinned = load_stack(stack_file)
    mi300x = host_facts(KB, "mi1", "Ubuntu", "24.04", *amd(MI300X, 8))
    h100 = host_facts(KB, "nv1", "Ubuntu", "24.04", *nvidia(H100, 8))
    plans = plan_hosts(KB, HostRequest(pinned=pinned), [mi300x, h100])
    assert (plans[0].stack, plans[0].refused) == (pinned, None) and plans[1].refused is not None
    driver = driver_plans(KB, ProvisionOptions(), (plans[0],))["mi1"]
    assert (driver["action"], driver["rocm"], driver["os"]) == ("install", "6.4", "ubuntu2404")
    out = tmp_path / "project"
    rendered = run_gpuenv("provision", "gpu01", "--stack", str(stack_file), "--render-only", str(out), timeout=60)
    assert rendered.returncode == 0, rendered.stderr
    written = yaml.safe_load((out / "group_vars/all/gpuenv.yml").read_text(encoding="utf-8"))
    assert (written["amdgpu_enabled"], written["amdgpu_rocm"], written["nvidia_driver_enabled"]) == (True, "6.4", False)
    assert written["amdgpu_supported"] == {"ubuntu": ["22.04", "24.04"], "rocky": ["8", "9"]}
    assert written["gpuenv_stack"]["build"] == "rocm6.4"


def test_provision_with_rocm_flags_renders_the_amdgpu_role_of_that_release(tmp_path: Path) -> None:
    out = tmp_path / "project"
    result = run_gpuenv(
        "provision", "gpu01", "--rocm", "7.0", "--os", "rockylinux9", "--render-only", str(out), timeout=60
    )
    assert result.returncode == 0, result.stderr
    written = yaml.safe_load((out / "group_vars/all/gpuenv.yml").read_text(encoding="utf-8"))
    assert (written["amdgpu_rocm"], written["amdgpu_supported"]) == (
        "7.0",
        {"ubuntu": ["22.04", "24.04"], "rocky": ["9"]},
    )
    refused = run_gpuenv(
        "provision", "gpu01", "--rocm", "7.0", "--os", "rockylinux8", "--render-only", str(tmp_path / "x")
    )
    assert refused.returncode == 2 and "AMD supports ROCm 7.0 on" in refused.stderr
