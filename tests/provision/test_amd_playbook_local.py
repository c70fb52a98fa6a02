"""The playbooks pick the driver role from the PCI vendor preflight finds, run for real on this machine.

Preflight's detection reads a made-up sysfs tree per case (preflight_pci_root: one directory per PCI
function with its vendor, device and class files, as the kernel lays them out), so the real shell
script, the real filters and the real roles' plan steps run through ansible-playbook with a local
connection, in one run (plan_driver.yml, then preflight's refusal); nothing is installed or changed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpuenv.adapters.ansible import run_playbook
from gpuenv.ansible.events import HostSummary
from gpuenv.ansible.project import PLAN
from gpuenv.ansible.runner import RunRequest, controller_path, runner_arguments
from gpuenv.kb import load_kb
from gpuenv.provision.variables import ProvisionOptions, kb_facts, render_variables
from gpuenv.resources import shipped_dir
from tests.conftest import require
from tests.provision.amd import H100, MI250X, MI300X, rocm_stack

# alias -> (PCI functions: (vendor, (device, class, name)) ..., overrides of the roles' plan facts)
AUDIO = ("ab28", "040300", "")  # an AMD GPU's HDMI audio function: not a GPU
CASES: dict[str, tuple[list[tuple[str, tuple[str, str, str]]], dict[str, Any]]] = {
    "u2404_mi300x": ([("1002", MI300X)] * 8 + [("1002", AUDIO)], {"distribution": "ubuntu", "version": "24.04"}),
    "u2204_mi250x": ([("1002", MI250X)] * 4, {"distribution": "ubuntu", "version": "22.04"}),
    "rocky9_mi300x": ([("1002", MI300X)] * 8, {"distribution": "rocky", "version": "9.4"}),
    "deb12_mi300x": ([("1002", MI300X)] * 8, {"distribution": "debian", "version": "12"}),
    "u2204_h100": ([("10de", H100)] * 8, {"distribution": "ubuntu", "version": "22.04"}),
}


def _sysfs(root: Path, functions: list[tuple[str, tuple[str, str, str]]]) -> Path:
    for i, (vendor, (device, pci_class, _)) in enumerate(functions):
        function = root / f"0000:{i + 16:02x}:00.0"
        function.mkdir(parents=True)
        for name, value in (("vendor", vendor), ("device", device), ("class", pci_class)):
            (function / name).write_text(f"0x{value}\n")
    return root


def _inventory(work: Path, python: str) -> str:
    hosts: dict[str, dict[str, Any]] = {}
    for alias, (functions, where) in CASES.items():
        values = {
            "ansible_connection": "local",
            "ansible_python_interpreter": python,
            "preflight_pci_root": str(_sysfs(work / "sysfs" / alias, functions)),
        }
        for role in ("amdgpu", "nvidia_driver"):  # the OS the plan is for; "not the controller" but one case
            values |= {f"{role}_distribution": where["distribution"], f"{role}_distribution_version": where["version"]}
            values |= {f"{role}_secure_boot": "disabled", f"{role}_is_controller": alias != "u2204_mi250x"}
        hosts[alias] = values
    hosts["u2204_h100"]["nvidia_driver_branch"] = "580"  # the variables are a ROCm stack's: no NVIDIA branch
    return json.dumps({"all": {"hosts": hosts}})


def _run(work: Path, playbook: str) -> Any:
    request = RunRequest(
        project_dir=work / "project", private_data_dir=work / playbook, playbook=playbook, path=controller_path()
    )
    return run_playbook(runner_arguments(request))


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Any:
    require(shutil.which("ansible-playbook", path=controller_path()) is not None, "ansible-core is not installed")
    work = tmp_path_factory.mktemp("amd-plan")
    project = work / "project"
    shutil.copytree(shipped_dir("playbooks"), project, ignore=shutil.ignore_patterns("__pycache__"))
    stack, kb = rocm_stack(), load_kb()
    (project / "group_vars/all").mkdir(parents=True)
    (project / "group_vars/all/gpuenv.yml").write_text(render_variables(stack, ProvisionOptions(), kb_facts(kb, stack)))
    (project / "inventory").mkdir()
    python = shutil.which("python3", path=controller_path()) or "/usr/bin/python3"
    (project / "inventory/hosts.yml").write_text(_inventory(work, python))
    (project / "plan_and_refuse.yml").write_text(
        f"---\n- name: Plan\n  ansible.builtin.import_playbook: {PLAN}\n"
        "- name: Preflight's refusal alone\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Refuse\n      ansible.builtin.include_role: {name: preflight, tasks_from: platform.yml}\n"
    )
    outcome = _run(work, "plan_and_refuse.yml")
    return outcome


@pytest.fixture(scope="module")
def plans(outcome: Any) -> dict[str, dict[str, Any]]:
    assert all(s.changed == 0 for s in outcome.tally.hosts.values())  # planning and refusing change nothing
    return dict(outcome.tally.plans)


def test_amd_hosts_get_the_amdgpu_plan_and_nvidia_hosts_the_nvidia_plan(plans: dict[str, dict[str, Any]]) -> None:
    assert set(plans) == set(CASES)
    assert plans["u2204_h100"]["branch"] == "R580" and "repos" not in plans["u2204_h100"]  # NVIDIA's plan
    mi300x = plans["u2404_mi300x"]
    assert (mi300x["action"], mi300x["rocm"], mi300x["os"]) == ("install", "6.4", "ubuntu2404")
    assert len(mi300x["gpus"]) == 8 and mi300x["generations"] == ["gfx942"]  # the audio function is no GPU
    assert mi300x["repos"][0] == {
        "name": "amdgpu",
        "url": "https://repo.radeon.com/amdgpu/6.4/ubuntu",
        "suite": "noble",
    }


def test_amdgpu_plans_per_os_and_the_control_machine(plans: dict[str, dict[str, Any]]) -> None:
    assert plans["u2204_mi250x"]["generations"] == ["gfx90a"] and plans["u2204_mi250x"]["repos"][1]["suite"] == "jammy"
    assert plans["u2204_mi250x"]["reboot_allowed"] is True
    assert plans["u2404_mi300x"]["reboot_allowed"] is False  # marked the control machine: never rebooted
    assert plans["rocky9_mi300x"]["repos"][0]["url"] == "https://repo.radeon.com/amdgpu/6.4/rhel/9.4/main/x86_64/"
    debian = plans["deb12_mi300x"]
    assert debian["action"] == "blocked" and "is not an OS AMD supports for ROCm 6.4" in debian["reason"]


def test_preflight_refuses_a_rocm_stack_on_nvidia_gpus_before_any_change(outcome: Any) -> None:
    hosts: dict[str, HostSummary] = outcome.tally.hosts
    failed = {h for h, s in hosts.items() if s.failed}
    assert failed == {"u2204_h100"}
    assert "u2204_h100: a ROCm 6.4 stack needs AMD Instinct GPUs, but the host has 8 NVIDIA GPU(s)" in (
        hosts["u2204_h100"].message
    )
    assert all(s.changed == 0 for s in hosts.values())
