"""Provision plans for AMD Instinct hosts, from gather facts of PCI vendor 1002, as the NVIDIA plans are tested.

A ROCm stack on an AMD host gets the amdgpu role (AMD's repositories of the stack's ROCm release,
amdgpu-dkms, AMD SMI); a ROCm stack on NVIDIA GPUs and a CUDA stack on AMD GPUs are refused with one
line naming the host and the GPUs found. Pure: no hosts, no Ansible run.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import yaml

from gpuenv.ansible.events import HostSummary
from gpuenv.errors import BadRequest
from gpuenv.kb import load_kb
from gpuenv.platforms.rocm import oses as amdgpus
from gpuenv.provision.driverplan import driver_plans
from gpuenv.provision.perhost import HostRequest, plan_hosts
from gpuenv.provision.plan import ProvisionResult
from gpuenv.provision.plantext import plan_lines
from gpuenv.provision.variables import ProvisionOptions, kb_facts, render_variables, variables
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from tests.conftest import REPO
from tests.provision.amd import H100, MI250X, MI300X, amd, host_facts, nvidia, rocm_stack
from tests.provision.test_core import FILTERS

FILTERS_DIR = REPO / "playbooks/filter_plugins"
_spec = importlib.util.spec_from_file_location("gpuenv_amdgpu", FILTERS_DIR / "gpuenv_amdgpu.py")
assert _spec and _spec.loader
AMDGPU = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(AMDGPU)
KB = load_kb()
ROCM = rocm_stack()
PINNED = HostRequest(pinned=ROCM)


def _plan(*facts: Any, request: HostRequest = PINNED, options: ProvisionOptions | None = None) -> dict[str, Any]:
    plans = plan_hosts(KB, request, list(facts))
    drivers = driver_plans(KB, options or ProvisionOptions(), tuple(plans))
    result = ProvisionResult(tuple(HostSummary(f.host) for f in facts), "successful", False, drivers, tuple(plans))
    return {"plans": {p.host: p for p in plans}, "drivers": drivers, "rows": result.rows(), "result": result}


def test_an_mi300x_host_on_ubuntu_gets_the_amdgpu_role_of_the_stacks_rocm_release() -> None:
    out = _plan(host_facts(KB, "mi1", "Ubuntu", "24.04", *amd(MI300X, 8)))
    assert out["plans"]["mi1"].refused is None and out["plans"]["mi1"].stack is ROCM
    driver = out["drivers"]["mi1"]
    assert (driver["action"], driver["rocm"], driver["os"], driver["family"]) == (
        "install",
        "6.4",
        "ubuntu2404",
        "ubuntu",
    )
    assert driver["repos"] == [
        {"name": "amdgpu", "url": "https://repo.radeon.com/amdgpu/6.4/ubuntu", "suite": "noble"},
        {"name": "rocm", "url": "https://repo.radeon.com/rocm/apt/6.4", "suite": "noble"},
    ]
    assert (
        driver["key_url"] == "https://repo.radeon.com/rocm/rocm.gpg.key" and driver["pin_origin"] == "repo.radeon.com"
    )
    assert driver["packages"] == ["amdgpu-dkms"] and driver["user_space"] == ["amd-smi-lib"]
    assert driver["headers"] == ["linux-headers-6.8.0-45-generic", "linux-modules-extra-6.8.0-45-generic"]
    assert driver["groups"] == ["render", "video"] and driver["generations"] == ["gfx942"]
    assert driver["reboot_allowed"] is True
    assert driver["action_line"].startswith("install amdgpu-dkms and AMD SMI of ROCm 6.4 from repo.radeon.com")


def test_the_plan_text_names_the_amd_gpus_the_rocm_release_and_the_role() -> None:
    out = _plan(host_facts(KB, "mi1", "Ubuntu", "24.04", *amd(MI300X, 8), amdgpu="6.12.12"))
    text = "\n".join(plan_lines(out["rows"], []))
    assert "8× MI300X (gfx942)" in text and "driver loaded: 6.12.12" in text
    assert "torch 2.9.1+rocm6.4, torchvision 0.24.1 (ROCm 6.4)" in text
    assert (
        "driver: install amdgpu-dkms and AMD SMI of ROCm 6.4 from repo.radeon.com over the loaded amdgpu 6.12.12"
        in text
    )
    row = out["rows"][0]
    assert row["facts"]["gpus"][0] == {
        "device_id": "74a1",
        "name": "AMD Instinct MI300X",
        "model": "MI300X",
        "sm": None,
        "vendor": "1002",
        "gfx": "gfx942",
        "label": "MI300X (gfx942)",
    }


def test_rocky_gets_amds_dnf_repositories_of_its_release() -> None:
    driver = _plan(host_facts(KB, "r9", "Rocky", "9.4", *amd(MI300X, 8)))["drivers"]["r9"]
    assert driver["family"] == "rhel" and driver["pin_origin"] is None
    assert [r["url"] for r in driver["repos"]] == [
        "https://repo.radeon.com/amdgpu/6.4/rhel/9.4/main/x86_64/",
        "https://repo.radeon.com/rocm/rhel9/6.4/main",
    ]
    assert driver["headers"][0] == "kernel-devel-6.8.0-45-generic"


def test_a_rocm_stack_on_nvidia_gpus_is_refused_naming_the_host_and_what_was_found() -> None:
    out = _plan(host_facts(KB, "nv1", "Ubuntu", "24.04", *nvidia(H100, 8)))
    assert out["plans"]["nv1"].refused == (
        "nv1: a ROCm 6.4 stack needs AMD Instinct GPUs, but the host has 8× H100 (sm_90)"
    )
    assert "nv1" not in out["drivers"] and out["result"].exit_code == 1


def test_a_cuda_stack_on_amd_gpus_is_refused_asked_for_or_pinned() -> None:
    host = host_facts(KB, "mi1", "Ubuntu", "22.04", *amd(MI300X, 8))
    asked = _plan(host, request=HostRequest(constraints=Request(cuda="12.8")))["plans"]["mi1"].refused
    assert asked == (
        "mi1: --cuda 12.8 asks for a CUDA stack, which needs NVIDIA GPUs, but the host has 8× MI300X (gfx942)"
    )
    cuda = resolve(KB, Request(os="ubuntu22.04", python="3.12"))
    pinned = _plan(host, request=HostRequest(pinned=cuda))["plans"]["mi1"].refused
    assert pinned == f"mi1: a CUDA {cuda.cuda} stack needs NVIDIA GPUs, but the host has 8× MI300X (gfx942)"


def test_a_host_with_both_vendors_gpus_is_refused() -> None:
    refused = _plan(host_facts(KB, "mix", "Ubuntu", "24.04", *amd(MI300X, 4), *nvidia(H100, 4)))["plans"]["mix"].refused
    assert (
        refused
        == "mix: the host mixes NVIDIA and AMD GPUs (4× MI300X (gfx942), 4× H100 (sm_90)); gpuenv installs one driver"
    )


def test_the_rocm_os_list_and_the_gpu_code_are_checked_per_host() -> None:
    debian = _plan(
        host_facts(KB, "d", "Debian", "12", *amd(MI300X, 8)), request=HostRequest(pinned=rocm_stack(python="3.11"))
    )
    assert debian["plans"]["d"].refused == (
        "ROCm 6.4 is not provisioned on debian12: the amdgpu role does not implement it "
        "(gpuenv provisions it on Ubuntu 22.04/24.04, Rocky Linux 8/9)"
    )
    mi250 = _plan(host_facts(KB, "m", "Ubuntu", "22.04", *amd(MI250X, 8)))["plans"]["m"].refused
    assert mi250 == "torch 2.9.1+rocm6.4 has no GPU code for MI250X (gfx90a): built for gfx942"
    both = _plan(
        host_facts(KB, "m", "Ubuntu", "22.04", *amd(MI250X, 8)),
        request=HostRequest(pinned=rocm_stack(arch_list="gfx90a;gfx942")),
    )
    assert both["plans"]["m"].refused is None and both["drivers"]["m"]["repos"][0]["suite"] == "jammy"


def test_amdgpu_plan_blocks_secure_boot_and_never_reboots_the_control_machine() -> None:
    blocked = _plan(host_facts(KB, "sb", "Ubuntu", "24.04", *amd(MI300X, 1), secure_boot="enabled"))["drivers"]["sb"]
    assert blocked["action"] == "blocked" and "mokutil --import" in blocked["reason"]
    allowed = _plan(
        host_facts(KB, "sb", "Ubuntu", "24.04", *amd(MI300X, 1), secure_boot="enabled"),
        options=ProvisionOptions(allow_secure_boot=True),
    )["drivers"]["sb"]
    assert allowed["action"] == "install"
    controller = _plan(host_facts(KB, "me", "Ubuntu", "24.04", *amd(MI300X, 1), is_controller=True))["drivers"]["me"]
    assert controller["reboot_allowed"] is False and "control machine" in controller["reboot_reason"]
    skipped = _plan(host_facts(KB, "me", "Ubuntu", "24.04", *amd(MI300X, 1)), options=ProvisionOptions(driver=False))
    assert skipped["drivers"]["me"]["action"] == "skip"


def test_variables_of_a_rocm_stack_enable_amdgpu_and_nothing_of_nvidia() -> None:
    data = yaml.safe_load(render_variables(ROCM, ProvisionOptions(), kb_facts(KB, ROCM)))
    assert data["amdgpu_enabled"] is True and data["amdgpu_rocm"] == "6.4" and data["amdgpu_smi"] is True
    assert data["amdgpu_supported"] == {"ubuntu": ["22.04", "24.04"], "rocky": ["8", "9"]}
    assert data["nvidia_driver_enabled"] is False and data["container_toolkit_enabled"] is False
    assert data["gpuenv_stack"]["build"] == "rocm6.4" and data["gpuenv_stack"]["driver_branch"] == "amdgpu-6.4"
    assert data["pytorch_index_url"] == "https://download.pytorch.org/whl/rocm6.4"
    cuda = resolve(KB, Request(os="debian12", python="3.11"))
    assert not any(k.startswith("amdgpu_") for k in variables(cuda, ProvisionOptions(), kb_facts(KB, cuda)))


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (ProvisionOptions(container_toolkit=True), "--with-container-toolkit installs NVIDIA's container toolkit"),
        (ProvisionOptions(driver_branch="580"), "--driver-branch names an NVIDIA driver branch"),
    ],
)
def test_nvidia_only_options_with_a_rocm_stack_are_refused(options: ProvisionOptions, said: str) -> None:
    with pytest.raises(BadRequest, match=said):
        variables(ROCM, options, kb_facts(KB, ROCM))


def test_pci_parsing_keeps_amd_gpus_and_drops_their_other_functions() -> None:
    devices = FILTERS.parse_pci(
        "0000:11:00.0 0x1002 0x74a1 0x120000\tAMD Instinct MI300X\n"
        "0000:29:00.0 0x1002 0x740c 0x038000\t\n"
        "0000:29:00.1 0x1002 0xab28 0x040300\tAMD audio\n"  # a GPU's audio function
        "0000:03:00.0 0x1002 0x515e 0x030000\tES1000\n"  # the onboard server VGA
        "0000:00:14.0 0x8086 0x1234 0x0c0330\tIntel USB\n"
        "0000:17:00.0 0x10de 0x2330 0x030200\tNVIDIA H100\n"
        "0000:18:00.0 0x2330 0x030200\n"  # preflight's lines before the vendor field: NVIDIA
    )
    summary = [(d["vendor"], d["device_id"], d["kind"], d["generation"]) for d in devices]
    assert summary == [
        ("1002", "74a1", "gpu", "gfx942"),
        ("1002", "740c", "gpu", "gfx90a"),
        ("10de", "2330", "gpu", "Hopper"),
        ("10de", "2330", "gpu", "Hopper"),
    ]
    assert devices[1]["name"] == "AMD device 1002:740c"


def test_the_playbook_refusal_says_what_provision_says() -> None:
    mi300x = FILTERS.parse_pci("0000:11:00.0 0x1002 0x74a1 0x120000\tAMD Instinct MI300X\n")
    h100 = FILTERS.parse_pci("0000:17:00.0 0x10de 0x2330 0x030200\tNVIDIA H100\n")
    refuse = FILTERS.platform_refusal
    assert refuse("nv1", "rocm", h100, "a ROCm 6.4 stack") == (
        "nv1: a ROCm 6.4 stack needs AMD Instinct GPUs, but the host has 1 NVIDIA GPU(s) (NVIDIA H100)"
    )
    assert refuse("mi1", "cuda", mi300x, "a CUDA 12.8 stack") == (
        "mi1: a CUDA 12.8 stack needs NVIDIA GPUs, but the host has 1 AMD GPU(s) (AMD Instinct MI300X)"
    )
    assert refuse("mi1", "rocm", mi300x, "a ROCm 6.4 stack") == "" and refuse("nv1", "cuda", h100, "x") == ""
    assert refuse("cpu", "cpu", mi300x + h100, "a CPU stack") == "" and refuse("none", "rocm", [], "x") == ""


def test_the_playbooks_device_table_and_os_lists_agree_with_the_knowledge_base() -> None:
    assert {i: g.gfx for g in KB.amd_gpus for i in g.pci_ids} == FILTERS.AMD_GFX_BY_DEVICE_ID
    defaults = yaml.safe_load((FILTERS_DIR.parent / "roles/amdgpu/defaults/main.yml").read_text(encoding="utf-8"))
    assert defaults["amdgpu_supported"] == amdgpus.rocm_host_oses(KB, defaults["amdgpu_rocm"])
    assert defaults["amdgpu_repo_base"] == AMDGPU.REPO_BASE and defaults["amdgpu_enabled"] is False
    assert AMDGPU.SUPPORTED == {"ubuntu": ["22.04", "24.04"], "rhel": ["8", "9"]}
