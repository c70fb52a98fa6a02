"""Provision across CPU architectures: the host's architecture (from its gathered facts) decides its stack, its
driver repository (NVIDIA's sbsa for aarch64 servers), the open kernel modules a Grace GPU needs, and a
mixed-architecture inventory resolves per host. Pure, over synthesized gather facts."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuenv.kb import load_kb
from gpuenv.provision.driverplan import driver_plans
from gpuenv.provision.gathered import facts_from_gathered
from gpuenv.provision.hostfacts import GatheredHost
from gpuenv.provision.options import ProvisionOptions
from gpuenv.provision.perhost import HostRequest, plan_hosts, request_from
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from tests.conftest import require, run_gpuenv

KB = load_kb()
ARM = KB.for_cpu_arch("aarch64")


def _facts(host: str, architecture: str, *devices: str, version: str = "22.04", driver: str = "") -> GatheredHost:
    raw: dict[str, Any] = {
        "distribution": "Ubuntu",
        "distribution_version": version,
        "architecture": architecture,
        "kernel": "6.8.0-1013-nvidia-64k",
        "headers": True,
        "devices": [{"kind": "gpu", "device_id": d, "name": ""} for d in devices],
        "secure_boot": "disabled",
        "is_controller": False,
        "driver": driver,
        "free_kb": "104857600",
        "pythons": ["python3.10"],
    }
    return facts_from_gathered(host, raw, KB)


def _builds(version: str) -> tuple[str, ...]:
    assert ARM is not None
    return next(t for t in ARM.torch if t.version == version).builds


def test_a_mixed_architecture_inventory_resolves_per_host() -> None:
    hosts = [_facts("h100", "x86_64", "2330"), _facts("gh200", "aarch64", "2342"), _facts("gb200", "aarch64", "2941")]
    plans = {p.host: p for p in plan_hosts(KB, HostRequest(constraints=Request(torch="2.8")), hosts)}
    x86, gh, gb = (plans[h].stack for h in ("h100", "gh200", "gb200"))
    assert x86 is not None and gh is not None and gb is not None, {h: p.refused for h, p in plans.items()}
    assert (x86.cpu_arch, x86.build) == ("x86_64", "cu128")  # x86_64's plain PyPI build
    assert (gh.cpu_arch, gh.build) == ("aarch64", "cu129") == (gb.cpu_arch, gb.build)  # aarch64's only 2.8 build
    assert gh.build in _builds("2.8.0") and "10.0" in gb.arch_list.split(";")


def test_a_mixed_gpu_aarch64_host_is_judged_by_the_aarch64_gpu_code() -> None:
    # torch 2.7's aarch64 cu128 has no sm_80 (x86_64's has): an A100 beside an H100 on Arm gets no 2.7 stack
    (plan,) = plan_hosts(KB, HostRequest(constraints=Request(torch="2.7")), [_facts("arm", "aarch64", "20b0", "2330")])
    assert plan.stack is None and plan.refused and "sm_80" in plan.refused
    (x86,) = plan_hosts(KB, HostRequest(constraints=Request(torch="2.7")), [_facts("x86", "x86_64", "20b0", "2330")])
    assert x86.stack is not None


def test_an_aarch64_host_gets_nvidias_sbsa_repository_and_open_modules_for_grace() -> None:
    hosts = [_facts("gh200", "aarch64", "2342"), _facts("h100", "x86_64", "2330")]
    plans = tuple(plan_hosts(KB, HostRequest(constraints=Request(cuda="12.4")), hosts))
    options = ProvisionOptions(
        driver_branch="535", driver_source="cuda-repo"
    )  # before R560 a Hopper alone would get the proprietary modules
    found = driver_plans(KB, options, plans)
    gh, h100 = found["gh200"], found["h100"]
    assert gh["repo"].endswith("/ubuntu2204/sbsa/") and h100["repo"].endswith("/ubuntu2204/x86_64/")
    assert gh["kernel_modules"] == "open" and h100["kernel_modules"] == "proprietary"
    assert gh["kernel_modules_reason"] == "the GPU model requires the open kernel modules"


def test_a_pinned_stack_of_another_architecture_is_refused() -> None:
    pinned = resolve(KB, Request(gpu="H100"))
    request, _ = request_from(Request(), wheels=None, skip_driver=False, pinned=pinned)
    (plan,) = plan_hosts(KB, request, [_facts("gh200", "aarch64", "2342")])
    assert plan.stack is None and plan.refused == "the stack is for x86_64, the host is aarch64"


def test_render_only_for_aarch64_writes_its_stack_and_guards_the_architecture(tmp_path: Path) -> None:
    done = run_gpuenv("provision", "gh1", "--render-only", str(tmp_path / "p"), "--cpu-arch", "arm64", "--torch", "2.8")
    assert done.returncode == 0, done.stderr
    written = yaml.safe_load((tmp_path / "p/group_vars/all/gpuenv.yml").read_text())
    assert written["gpuenv_stack"]["cpu_arch"] == "aarch64" and written["gpuenv_stack"]["build"] == "cu129"
    assert written["pytorch_index_url"].endswith("/cu129")
    assert written["nvidia_driver_open_modules_by_device"]["2342"] == "required"


def test_the_role_default_of_open_modules_by_device_is_the_knowledge_bases() -> None:
    from gpuenv.platforms.cuda.host import open_modules_by_device

    defaults = yaml.safe_load(
        (Path(__file__).parents[2] / "playbooks/roles/nvidia_driver/defaults/main.yml").read_text()
    )
    assert defaults["nvidia_driver_open_modules_by_device"] == open_modules_by_device(KB)
    assert {"2342", "2348", "2941"} <= set(open_modules_by_device(KB))


def test_cpu_arch_asked_refuses_a_host_of_another_architecture() -> None:
    request, _ = request_from(Request(cpu_arch="aarch64"), wheels=None, skip_driver=False, pinned=None)
    plans = {
        p.host: p for p in plan_hosts(KB, request, [_facts("x86", "x86_64", "2330"), _facts("gh", "aarch64", "2342")])
    }
    assert plans["x86"].stack is None and plans["x86"].refused == "the host is x86_64, --cpu-arch asks for aarch64"
    assert plans["gh"].stack is not None and plans["gh"].stack.cpu_arch == "aarch64"


PREFLIGHT_PROBE = """- hosts: localhost
  gather_facts: false
  vars_files: [{defaults}]
  tasks:
    - ansible.builtin.debug: {{msg: "{{{{ preflight_architectures | join(',') }}}}"}}
"""


@pytest.mark.parametrize(("stack", "served"), [({"cpu_arch": "aarch64"}, "aarch64"), (None, "x86_64,aarch64")])
def test_preflight_serves_the_stacks_architecture_alone(
    stack: dict[str, str] | None, served: str, tmp_path: Path
) -> None:
    """Ansible itself evaluates the role's default: a project written for aarch64 refuses an x86_64 host."""
    playbook = shutil.which("ansible-playbook")
    require(playbook is not None, "needs ansible-playbook (the ansible extra)")
    defaults = Path(__file__).parents[2] / "playbooks/roles/preflight/defaults/main.yml"
    probe = tmp_path / "probe.yml"
    probe.write_text(PREFLIGHT_PROBE.format(defaults=defaults))
    extra = ["-e", json.dumps({"gpuenv_stack": stack})] if stack else []
    done = subprocess.run(
        [str(playbook), "-i", "localhost,", "-c", "local", str(probe), *extra],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:]
    assert f'"msg": "{served}"' in done.stdout
