"""Per-host resolution over synthesized gather facts: the OSes and GPUs gpuenv provisions. Pure, no hosts."""

from __future__ import annotations

from typing import Any

import pytest

from gpuenv.ansible.events import _message
from gpuenv.errors import BadRequest
from gpuenv.kb import load_kb
from gpuenv.platforms.cuda.host import action_line
from gpuenv.provision.driverplan import driver_plans
from gpuenv.provision.gathered import facts_from_gathered
from gpuenv.provision.hostfacts import GatheredHost
from gpuenv.provision.perhost import (
    HostRequest,
    check_request,
    plan_hosts,
    request_from,
    wheelhouse_torch,
)
from gpuenv.provision.variables import ProvisionOptions, requirements
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve

KB = load_kb()
OSES = {  # Ansible's distribution facts -> the knowledge base's OS
    ("Ubuntu", "20.04"): "ubuntu20.04",
    ("Ubuntu", "22.04"): "ubuntu22.04",
    ("Ubuntu", "24.04"): "ubuntu24.04",
    ("Debian", "12"): "debian12",
    ("Rocky", "8.10"): "rockylinux8",
    ("Rocky", "9.4"): "rockylinux9",
}
GPUS = {"V100": ("1db5", "7.0"), "A100": ("20b0", "8.0"), "L4": ("27b8", "8.9"), "H100": ("2330", "9.0")}
GPUS["B200"] = ("2901", "10.0")


def _facts(host: str, dist: str, version: str, *devices: str, driver: str = "", **extra: Any) -> GatheredHost:
    raw = {
        "distribution": dist,
        "distribution_version": version,
        "architecture": "x86_64",
        "kernel": "6.8.0-45-generic",
        "headers": True,
        "devices": [{"kind": "gpu", "device_id": d, "name": ""} for d in devices]
        + [{"kind": "nvswitch", "device_id": "22a3", "name": ""}] * extra.pop("nvswitches", 0),
        "secure_boot": "disabled",
        "is_controller": False,
        "driver": driver,
        "free_kb": "104857600",
        "pythons": ["python3.10", "python3.12", "not-a-python"],
        **extra,
    }
    return facts_from_gathered(host, raw, KB)


def _code_for(stack: Any, sm: str) -> bool:
    from gpuenv.kb import gpu_code_for

    release = next(t for t in KB.torch if t.version == stack.torch)
    return gpu_code_for(release.arch[stack.build], sm) is not None


@pytest.mark.parametrize(("dist", "version"), list(OSES))
@pytest.mark.parametrize("gpu", list(GPUS))
def test_each_os_and_gpu_gets_a_stack_for_its_own_os_and_gpu(dist: str, version: str, gpu: str) -> None:
    device, sm = GPUS[gpu]
    (plan,) = plan_hosts(KB, HostRequest(), [_facts("n1", dist, version, device, device)])
    assert plan.refused is None, plan.refused
    assert plan.stack is not None and plan.stack.os == OSES[(dist, version)]
    assert plan.stack.gpu_sm == sm and _code_for(plan.stack, sm)
    assert plan.stack.python in KB.os_by_name[plan.stack.os].python
    # the same answer the resolver gives when told the OS and the GPU by hand
    by_hand = resolve(KB, Request(os=OSES[(dist, version)], gpu=gpu))
    assert (plan.stack.torch, plan.stack.build, plan.stack.python) == (
        by_hand.torch,
        by_hand.build,
        by_hand.python,
    )


def test_a_v100_never_gets_a_build_without_sm70() -> None:
    (plan,) = plan_hosts(KB, HostRequest(), [_facts("old", "Ubuntu", "22.04", "1db5")])
    assert plan.stack is not None and _code_for(plan.stack, "7.0")
    default = resolve(KB, Request(os="ubuntu22.04"))
    assert not _code_for(default, "7.0")  # what the host would have got without its facts


@pytest.mark.parametrize(("dist", "version"), list(OSES))
def test_no_gpu_gets_a_cpu_stack_with_a_warning(dist: str, version: str) -> None:
    (plan,) = plan_hosts(KB, HostRequest(), [_facts("cpu1", dist, version)])
    assert plan.stack is not None and plan.stack.platform == "cpu"
    assert plan.stack.index_url.endswith("/cpu") and plan.stack.driver_branch == "none"
    assert any("CPU stack" in w and "no NVIDIA or AMD GPU" in w for w in plan.warnings)
    assert plan.stack.validate() == plan.stack
    assert requirements(plan.stack, torch_only=True)[0] == f"torch=={plan.stack.torch}"


def test_no_gpu_with_cuda_asked_gets_cuda() -> None:
    request, _ = request_from(Request(cuda="12.6"), wheels=None, skip_driver=False, pinned=None)
    (plan,) = plan_hosts(KB, request, [_facts("cpu1", "Debian", "12")])
    assert plan.stack is not None and plan.stack.build == "cu126"


def test_a_mixed_node_gets_one_stack_for_all_its_gpus() -> None:
    (plan,) = plan_hosts(KB, HostRequest(), [_facts("mix", "Ubuntu", "22.04", "1db5", "2330", "2330")])
    assert plan.stack is not None, plan.refused
    assert _code_for(plan.stack, "7.0") and _code_for(plan.stack, "9.0")
    assert plan.stack.arch_list == "7.0;9.0" and plan.stack.gpu_sm is None
    assert "2× H100 (sm_90)" in plan.facts.gpu_label() and "1× V100 (sm_70)" in plan.facts.gpu_label()


def test_a_fleet_of_kinds_in_one_plan_shares_stacks_between_identical_hosts() -> None:
    fleet = [
        _facts("v1", "Ubuntu", "22.04", "1db5"),
        _facts("v2", "Ubuntu", "22.04", "1db5"),
        _facts("h1", "Ubuntu", "24.04", "2330"),
        _facts("b1", "Rocky", "9.4", "2901"),
        _facts("c1", "Debian", "12"),
    ]
    plans = {p.host: p for p in plan_hosts(KB, HostRequest(), fleet)}
    assert plans["v1"].stack is plans["v2"].stack  # same facts: one resolution
    stacks = {p.stack.os + p.stack.build for p in plans.values() if p.stack}
    assert len(stacks) == 4


def test_user_constraints_apply_to_every_host() -> None:
    request, _ = request_from(Request(torch="2.13.0", python="3.11"), wheels=None, skip_driver=False, pinned=None)
    plans = plan_hosts(KB, request, [_facts("a", "Ubuntu", "24.04", "2330"), _facts("b", "Rocky", "8.10", "27b8")])
    assert {(p.stack.torch, p.stack.python) for p in plans if p.stack} == {("2.13.0", "3.11")}


def test_os_and_gpu_flags_are_checks_that_refuse_other_hosts() -> None:
    request, _ = request_from(Request(os="debian12", gpu="L4"), wheels=None, skip_driver=False, pinned=None)
    plans = plan_hosts(
        KB,
        request,
        [_facts("ok", "Debian", "12", "27b8"), _facts("os", "Ubuntu", "22.04", "27b8"), _facts("gpu", "Debian", "12")],
    )
    by = {p.host: p for p in plans}
    assert by["ok"].stack is not None and by["ok"].refused is None
    assert by["os"].refused == "the host runs ubuntu22.04, --os asks for debian12"
    assert by["gpu"].refused == "the host has no NVIDIA GPU, --gpu asks for L4"


def test_an_unsupported_os_is_refused_with_the_list() -> None:
    (plan,) = plan_hosts(KB, HostRequest(), [_facts("f", "Fedora", "40", "2330")])
    assert plan.refused and plan.refused.startswith("Fedora 40 is not an OS gpuenv provisions")


def test_skip_driver_makes_the_loaded_driver_a_constraint() -> None:
    request, _ = request_from(Request(), wheels=None, skip_driver=True, pinned=None)
    (plan,) = plan_hosts(KB, request, [_facts("kept", "Ubuntu", "22.04", "2330", driver="535.183.01")])
    assert plan.stack is not None and "535.183.01" in plan.stack.reasons["driver"]
    assert plan.stack.build != resolve(KB, Request(os="ubuntu22.04", gpu="H100")).build
    # a driver too old for anything: that host is refused, not the request
    (old,) = plan_hosts(KB, request, [_facts("old", "Ubuntu", "22.04", "2330", driver="418.87.01")])
    assert old.stack is None and old.refused


def test_a_request_no_host_could_satisfy_is_exit_2_before_any_host() -> None:
    request, _ = request_from(Request(torch="2.13.0", python="3.9"), wheels=None, skip_driver=False, pinned=None)
    with pytest.raises(BadRequest):
        check_request(KB, request)
    fine, _ = request_from(Request(python="3.12"), wheels=None, skip_driver=False, pinned=None)
    assert check_request(KB, fine).python == "3.12"  # Debian lacks 3.12, Ubuntu has it: a host matter


def test_the_wheelhouse_says_torch_build_and_python() -> None:
    names = ["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "numpy-2.4.6-cp311-cp311-x.whl"]
    wheels = wheelhouse_torch(names)
    assert (wheels.torch, wheels.build, wheels.python, wheels.has_torchvision) == ("2.13.0", "cpu", "3.11", False)
    request, notes = request_from(Request(), wheels=wheels, skip_driver=False, pinned=None, torch_only=True)
    assert notes == ["from the wheelhouse: torch 2.13.0+cpu, Python 3.11"]
    plans = plan_hosts(KB, request, [_facts("d", "Debian", "12"), _facts("u", "Ubuntu", "22.04", "2330")])
    for plan in plans:
        assert plan.stack is not None and plan.stack.platform == "cpu" and plan.stack.torch == "2.13.0"
        assert plan.stack.python == "3.11" and plan.stack.torchvision is None
    assert plans[1].stack and plans[1].stack.python_source.via == "distro"
    assert any("wheelhouse holds torch's CPU build" in w for w in plans[1].warnings)  # GPUs left unused: said
    cuda = wheelhouse_torch(["torch-2.13.0+cu126-cp312-cp312-manylinux_2_28_x86_64.whl", "torchvision-0.28.0.whl"])
    request, _ = request_from(Request(), wheels=cuda, skip_driver=False, pinned=None)
    assert request.constraints == Request(torch="2.13.0", cuda="cu126", python="3.12")
    with pytest.raises(BadRequest, match="several torch releases"):
        wheelhouse_torch(["torch-2.13.0-cp311-cp311-x.whl", "torch-2.14.0-cp311-cp311-x.whl"])


def test_a_pinned_stack_refuses_the_hosts_it_cannot_serve() -> None:
    pinned = resolve(KB, Request(os="ubuntu22.04", python="3.10", torch="2.13.0", cuda="12.6"))
    request, _ = request_from(Request(), wheels=None, skip_driver=True, pinned=pinned)
    plans = plan_hosts(
        KB,
        request,
        [
            _facts("u", "Ubuntu", "22.04", "2330", driver="580.95.05"),
            _facts("d", "Debian", "12", "2330", driver="580.95.05"),
            _facts("b", "Ubuntu", "22.04", "2901", driver="580.95.05"),
            _facts("o", "Ubuntu", "22.04", "2330", driver="470.256.02"),
        ],
    )
    by = {p.host: p for p in plans}
    assert by["u"].stack is pinned
    assert by["d"].refused == "debian12 has no known way to provide Python 3.10 (has 3.11)"
    assert by["b"].refused and "no GPU code for B200 (sm_100)" in by["b"].refused
    assert by["o"].refused and by["o"].refused.startswith("the loaded driver, kept by --skip-driver, cannot run")


def test_driver_plan_per_host_says_install_upgrade_or_keep() -> None:
    hosts = [
        _facts("new", "Ubuntu", "22.04", "2330"),
        _facts("old", "Ubuntu", "22.04", "2330", driver="550.90.07"),
        _facts("cpu", "Debian", "12"),
    ]
    plans = plan_hosts(KB, HostRequest(), hosts)
    out = driver_plans(KB, ProvisionOptions(), tuple(plans))
    assert out["new"]["action"] == "install" and out["new"]["action_line"].startswith("install R580")
    assert (
        out["old"]["action_line"].startswith("upgrade 550.90.07 → R580")
        and "reboot needed" in out["old"]["action_line"]
    )
    assert out["cpu"]["action"] == "skip" and "CPU stack" in out["cpu"]["action_line"]
    keep = action_line({**out["new"]}, "580.95.05")
    assert keep.startswith("keep the loaded 580.95.05")


def test_a_failed_tasks_message_shows_the_lines_that_explain_it() -> None:
    pip = {
        "msg": "stdout: Looking in links: /var/cache/gpuenv/wheelhouse\nProcessing ./torch.whl\n\n:stderr: "
        "ERROR: Could not find a version that satisfies the requirement click>=8.1 (from versions: none)\n"
        "ERROR: No matching distribution found for click>=8.1\n",
    }
    message = _message("Install gpuenv's dependencies into the venv", pip)
    assert "No matching distribution found for click>=8.1" in message and "Looking in links" not in message
    apt = {"msg": "'/usr/bin/apt-get -y install python3.10' failed: E: Unable to locate package python3.10\n"}
    assert "E: Unable to locate package python3.10" in _message("Install Python", apt)
    plain = {"msg": "the host is not supported"}
    assert _message("Check", plain) == "Check: the host is not supported"
