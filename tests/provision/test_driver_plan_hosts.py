"""The driver plan step, run for real on the test host with its GPU and OS facts overridden.

One ansible run covers the whole matrix: every case is an inventory alias of the same test host
carrying its own overrides (Ansible forks them in parallel).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuenv.adapters.ansible import run_playbook
from gpuenv.ansible.project import PLAN
from gpuenv.ansible.runner import RunRequest, runner_arguments
from gpuenv.kb import load_kb
from gpuenv.provision.variables import ProvisionOptions, kb_facts, render_variables
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from gpuenv.resources import shipped_dir
from tests.provision import hosts as test_hosts

pytestmark = [pytest.mark.ssh]

H100 = {"device": "2330", "count": 8, "nvswitch": 4, "name": "NVIDIA H100 SXM5 80GB"}
L4 = {"device": "27b8", "count": 1, "nvswitch": 0, "name": "NVIDIA L4"}
V100 = {"device": "1db5", "count": 8, "nvswitch": 6, "name": "Tesla V100-SXM2-32GB"}
B200 = {"device": "2901", "count": 8, "nvswitch": 2, "name": "NVIDIA B200"}

CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "u2004_l4": ("Ubuntu", "20.04", L4),
    "u2204_h100": ("Ubuntu", "22.04", H100),
    "u2404_b200": ("Ubuntu", "24.04", B200),
    "u2204_v100": ("Ubuntu", "22.04", V100),
    "deb12_l4": ("Debian", "12", L4),
    "deb12_b200": ("Debian", "12", B200),
    "rocky8_v100": ("Rocky", "8.10", V100),
    "rocky9_h100": ("Rocky", "9.4", H100),
    "rocky9_l4": ("Rocky", "9.4", L4),
    "real": ("", "", {}),  # the test host as it is: Debian 12, no GPU
    "controller_l4": ("Debian", "12", L4),  # control-machine detection left to the real facts
}


def _gpu_facts(gpu: dict[str, Any]) -> list[dict[str, str]]:
    return [
        {
            "slot": f"0000:{i + 16:02x}:00.0",
            "device_id": gpu["device"],
            "class": "030200",
            "kind": "gpu",
            "name": gpu["name"],
            "generation": "",
        }
        for i in range(gpu["count"])
    ]


def _inventory(host: test_hosts.TestHost, key: Path) -> str:
    lines = ["all:", "  hosts:"]
    for alias, (dist, version, gpu) in CASES.items():
        values: dict[str, Any] = {
            "ansible_host": host.address,
            "ansible_port": host.port,
            "ansible_ssh_private_key_file": str(key),
            "ansible_user": "root",
            "ansible_python_interpreter": "/usr/bin/python3",
        }
        if dist:
            values |= {
                "nvidia_driver_distribution": dist.lower(),
                "nvidia_driver_distribution_version": version,
                "nvidia_driver_gpus": _gpu_facts(gpu),
                "nvidia_driver_nvswitch_count": gpu["nvswitch"],
                "nvidia_driver_secure_boot": "disabled",
            }
        if dist and alias != "controller_l4":
            values["nvidia_driver_is_controller"] = False
        lines.append(f"    {alias}:")
        lines += [f"      {k}: {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def plans(ssh_hosts: test_hosts.HostSet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    import shutil

    work = tmp_path_factory.mktemp("plan")
    project = work / "project"
    shutil.copytree(shipped_dir("playbooks"), project, ignore=shutil.ignore_patterns("__pycache__"))
    kb = load_kb()
    stack = resolve(kb, Request(os="debian12", python="3.11", cuda="12.4"))  # 535 runs 12.4: Debian non-free is fine
    (project / "group_vars/all").mkdir(parents=True)
    (project / "group_vars/all/gpuenv.yml").write_text(render_variables(stack, ProvisionOptions(), kb_facts(kb, stack)))
    (project / "inventory").mkdir()
    (project / "inventory/hosts.yml").write_text(_inventory(ssh_hosts.hosts[0], ssh_hosts.key))
    request = RunRequest(
        project_dir=project,
        private_data_dir=work,
        playbook=PLAN,
        forks=10,
        path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    )
    with pytest.MonkeyPatch.context() as patch:
        for name, value in ssh_hosts.env().items():
            patch.setenv(name, value)
        outcome = run_playbook(runner_arguments(request))
    assert outcome.rc == 0, {h: s.message for h, s in outcome.tally.hosts.items()}
    assert all(s.changed == 0 for s in outcome.tally.hosts.values())  # planning changes nothing
    return outcome.tally.plans


def test_every_case_got_a_plan(plans: dict[str, dict[str, Any]]) -> None:
    assert set(plans) == set(CASES)


def test_the_real_test_host_skips_and_would_never_be_rebooted(plans: dict[str, dict[str, Any]]) -> None:
    assert plans["real"]["action"] == "skip"
    assert plans["real"]["reason"] == "no NVIDIA GPU found on the PCI bus"
    # The chrooted host runs on the controller's kernel (same boot id): rebooting it would reboot us.
    controller = plans["controller_l4"]
    assert controller["action"] == "install" and controller["reboot_allowed"] is False
    assert "control machine" in controller["reboot_reason"]


def test_ubuntu_plans(plans: dict[str, dict[str, Any]]) -> None:
    h100 = plans["u2204_h100"]
    decided = (h100["action"], h100["source"], h100["branch"], h100["kernel_modules"])
    assert decided == ("install", "distro", "R580", "open")
    assert h100["packages"] == ["nvidia-headless-580-server-open", "nvidia-utils-580-server"]
    assert h100["fabric_manager"] == ["nvidia-fabricmanager-580", "libnvidia-nscq-580"]
    assert h100["hold"] == h100["packages"] and h100["hold_method"] == "apt-mark"
    assert h100["reboot_allowed"] is True and h100["blacklist_nouveau"] is True
    assert h100["headers"][0].startswith("linux-headers-")
    v100 = plans["u2204_v100"]
    assert v100["kernel_modules"] == "proprietary" and v100["packages"][0] == "nvidia-headless-580-server"
    assert v100["fabric_manager"]  # HGX V100 has NVSwitches
    l4 = plans["u2004_l4"]
    assert l4["source"] == "cuda-repo" and l4["repo"].endswith("/ubuntu2004/x86_64/")
    assert l4["packages"] == ["nvidia-open-580"] and l4["fabric_manager"] == []
    b200 = plans["u2404_b200"]
    assert b200["kernel_modules"] == "open" and "requires" in b200["kernel_modules_reason"]
    assert "nvlsm" in b200["fabric_manager"]


def test_debian_plans(plans: dict[str, dict[str, Any]]) -> None:
    l4 = plans["deb12_l4"]
    assert (l4["source"], l4["branch"]) == ("distro", "R535")  # non-free 535 runs CUDA 12.4 on an L4
    assert l4["kernel_modules"] == "proprietary"  # open modules are the default only from R560
    assert l4["packages"] == ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "firmware-misc-nonfree"]
    b200 = plans["deb12_b200"]  # Blackwell needs R570+: NVIDIA's repository for Debian 12
    assert (b200["source"], b200["branch"], b200["kernel_modules"]) == ("cuda-repo", "R580", "open")
    assert b200["repo"].endswith("/debian12/x86_64/") and b200["packages"] == ["nvidia-open-580"]


def test_rocky_plans(plans: dict[str, dict[str, Any]]) -> None:
    v100 = plans["rocky8_v100"]
    assert (v100["os"], v100["source"], v100["module_stream"]) == ("rhel8", "cuda-repo", "580-dkms")
    assert v100["hold_method"] == "versionlock" and v100["headers"][0].startswith("kernel-devel-")
    h100 = plans["rocky9_h100"]
    assert h100["module_stream"] == "580-open" and h100["fabric_manager"] == ["nvidia-fabric-manager"]
    assert h100["repo"].endswith("/rhel9/x86_64/")
    assert plans["rocky9_l4"]["fabric_manager"] == []
