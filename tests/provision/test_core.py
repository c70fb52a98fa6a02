"""The pure half of provision: variables, ansible-runner arguments, event tally, the driver plan filter."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuenv.ansible.events import HostTally, Progress, progress_from_event
from gpuenv.ansible.runner import BECOME_PROMPT, RESULT_LIMIT, RunRequest, runner_arguments
from gpuenv.errors import BadRequest
from gpuenv.kb import load_kb
from gpuenv.provision.variables import ProvisionOptions, kb_facts, render_variables
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from tests.conftest import REPO


def _stack(**request: str) -> Any:
    return resolve(load_kb(), Request(**request))


def _load_filters() -> Any:
    spec = importlib.util.spec_from_file_location("gpuenv_filters", REPO / "playbooks/filter_plugins/gpuenv_filters.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FILTERS = _load_filters()


def test_variables_carry_the_stack_and_the_options() -> None:
    stack = _stack(os="debian12", python="3.11", torch="2.13.0")
    kb = load_kb()
    text = render_variables(
        stack,
        ProvisionOptions(wheelhouse="/srv/wheels", torch_only=True, verify_device="cpu", driver_branch="R590"),
        kb_facts(kb, stack),
    )
    data = yaml.safe_load(text)
    assert data["pytorch_requirements"] == ["torch==2.13.0", stack.numpy]
    assert data["pytorch_wheelhouse"] == "/srv/wheels" and data["pytorch_index_url"] == ""
    assert data["nvidia_driver_branch"] == "590"
    assert data["verify_device"] == "cpu" and data["verify_venv"] == data["pytorch_venv"]
    assert data["pytorch_python_by_os"]["debian12"]["packages"] == ["python3.11", "python3.11-venv", "python3.11-dev"]
    assert data["nvidia_driver_open_modules_policy"]["Blackwell"] == "required"
    # CUDA 13 needs R580: Debian's non-free 535 does not run it
    assert data["nvidia_driver_debian_nonfree_ok"] is False


def test_debian_nonfree_driver_is_allowed_when_it_runs_the_stack() -> None:
    stack = _stack(os="debian12", python="3.11", cuda="12.1")
    facts = kb_facts(load_kb(), stack)
    data = yaml.safe_load(render_variables(stack, ProvisionOptions(), facts))
    assert data["nvidia_driver_debian_nonfree_ok"] is True
    assert data["pytorch_index_url"] == stack.index_url
    assert any(r.startswith("torchvision==") for r in data["pytorch_requirements"])


def test_template_markup_never_reaches_the_variables() -> None:
    stack = _stack(os="debian12", python="3.11")
    with pytest.raises(BadRequest, match="template markup"):
        render_variables(stack, ProvisionOptions(venv="/opt/{{ lookup('pipe','id') }}"), kb_facts(load_kb(), stack))


def test_runner_arguments_are_a_plain_dict() -> None:
    req = RunRequest(
        project_dir=Path("/w/project"),
        private_data_dir=Path("/w"),
        forks=5,
        limit="gpu01,rack2",
        check=True,
        ask_become_pass=True,
        timeout_s=600,
        path="/venv/bin:/usr/bin",
    )
    assert runner_arguments(req) == {
        "private_data_dir": "/w",
        "project_dir": "/w/project",
        "playbook": "site.yml",
        "inventory": "/w/project/inventory/hosts.yml",
        "forks": 5,
        "limit": "gpu01,rack2",
        "cmdline": "--check --diff --ask-become-pass",
        "envvars": {
            "PATH": "/venv/bin:/usr/bin",
            "ANSIBLE_CONFIG": "/w/project/ansible.cfg",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
            "MAX_EVENT_RES": str(RESULT_LIMIT),
        },
        "quiet": True,
        "suppress_env_files": True,
        "timeout": 600,
    }
    plain = runner_arguments(
        RunRequest(project_dir=Path("/p"), private_data_dir=Path("/d"), playbook="plan_driver.yml")
    )
    assert "cmdline" not in plain and "limit" not in plain and plain["playbook"] == "plan_driver.yml"


def test_limit_refuses_shell_and_templates() -> None:
    for bad in ("gpu01;reboot", "{{x}}", "a b", "$(id)"):
        with pytest.raises(BadRequest):
            runner_arguments(RunRequest(project_dir=Path("/p"), private_data_dir=Path("/d"), limit=bad))


def test_the_become_prompt_matches_ansibles() -> None:
    import re

    assert re.search(BECOME_PROMPT, "BECOME password: ", re.M)
    assert re.search(BECOME_PROMPT, "BECOME password[defaults to SSH password]:", re.M)


def _event(kind: str, host: str | None = "h1", **data: Any) -> dict[str, Any]:
    return {"event": kind, "event_data": {"host": host, "task": "Install", **data}}


def test_progress_lines_from_events() -> None:
    assert progress_from_event(_event("runner_on_ok", res={"changed": True})) == Progress("h1", "Install", "changed")
    assert progress_from_event(_event("runner_on_ok", res={})) == Progress("h1", "Install", "ok")
    assert progress_from_event(_event("runner_on_failed")) == Progress("h1", "Install", "failed")
    assert progress_from_event(_event("runner_on_failed", ignore_errors=True)).status == "ignored"  # type: ignore[union-attr]
    assert progress_from_event(_event("runner_on_unreachable")).status == "unreachable"  # type: ignore[union-attr]
    assert progress_from_event(_event("playbook_on_start", host=None)) is None


def test_tally_takes_counts_from_stats_and_the_first_failure() -> None:
    tally = HostTally()
    tally.add(_event("runner_on_unreachable", host="ghost", res={"msg": "Failed to connect\nmore"}))
    tally.add(_event("runner_on_failed", host="h2", res={"msg": "apt failed"}))
    tally.add(_event("runner_on_failed", host="h2", res={"msg": "later"}))
    tally.add(_event("runner_on_ok", res={"ansible_facts": {"nvidia_driver_plan": {"action": "skip"}}}))
    tally.add(
        {
            "event": "playbook_on_stats",
            "event_data": {
                "ok": {"h1": 30, "h2": 4},
                "changed": {"h1": 2},
                "failures": {"h2": 1},
                "dark": {"ghost": 1},
                "skipped": {"h1": 9},
                "processed": {"h1": 1, "h2": 1, "ghost": 1},
            },
        }
    )
    hosts = tally.hosts
    assert tally.stats_seen
    assert (hosts["h1"].ok, hosts["h1"].changed, hosts["h1"].skipped, hosts["h1"].succeeded) == (30, 2, 9, True)
    assert hosts["h2"].failed == 1 and hosts["h2"].message == "Install: apt failed"
    assert hosts["ghost"].unreachable == 1 and hosts["ghost"].message == "Install: Failed to connect"
    assert tally.plans == {"h1": {"action": "skip"}}


# --- the driver plan (the filter the plan step runs) -----------------------------------------


def _facts(**over: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "distribution": "ubuntu",
        "distribution_version": "22.04",
        "architecture": "x86_64",
        "kernel": "6.8.0-45",
        "gpus": [],
        "nvswitch_count": 0,
        "secure_boot": "disabled",
        "is_controller": False,
        "branch": "580",
        "source": "auto",
        "kernel_modules": "auto",
        "allow_secure_boot": False,
        "reboot": True,
        "debian_nonfree_ok": False,
        "debian_nonfree_branch": "535",
        "cuda_repo_base": "https://developer.download.nvidia.com/compute/cuda/repos",
        "open_modules_policy": {
            "Volta": "unsupported",
            "Turing": "recommended",
            "Ampere": "recommended",
            "Ada": "recommended",
            "Hopper": "recommended",
            "Blackwell": "required",
        },
    }
    facts.update(over)
    return facts


def _gpus(device: str, count: int) -> list[dict[str, str]]:
    return FILTERS.parse_pci("".join(f"0000:{i:02x}:00.0 0x{device} 0x030200\n" for i in range(count)))


def test_pci_parsing_and_generations() -> None:
    devices = FILTERS.parse_pci("0000:17:00.0 0x2330 0x030200\tNVIDIA H100\n0000:05:00.0 0x22a3 0x068000\t\nbad\n")
    assert [(d["kind"], d["generation"]) for d in devices] == [("gpu", "Hopper"), ("nvswitch", "Ampere")]
    assert devices[0]["name"] == "NVIDIA H100"
    assert FILTERS.generation("1db5") == "Volta" and FILTERS.generation("2901") == "Blackwell"
    assert FILTERS.secure_boot_state("SecureBoot enabled\n") == "enabled"
    assert FILTERS.secure_boot_state("legacy-bios") == "disabled"


def test_plan_skips_without_gpu_and_blocks_on_secure_boot() -> None:
    assert FILTERS.driver_plan(_facts())["action"] == "skip"
    blocked = FILTERS.driver_plan(_facts(gpus=_gpus("27b8", 1), secure_boot="enabled"))
    assert blocked["action"] == "blocked" and "mokutil --import" in blocked["reason"]
    allowed = FILTERS.driver_plan(_facts(gpus=_gpus("27b8", 1), secure_boot="enabled", allow_secure_boot=True))
    assert allowed["action"] == "install"


def test_plan_never_reboots_the_control_machine() -> None:
    plan = FILTERS.driver_plan(_facts(gpus=_gpus("27b8", 1), is_controller=True))
    assert plan["reboot_allowed"] is False and "control machine" in plan["reboot_reason"]


def test_plan_refuses_impossible_module_choices() -> None:
    assert FILTERS.driver_plan(_facts(gpus=_gpus("2901", 8), kernel_modules="proprietary"))["action"] == "blocked"
    assert FILTERS.driver_plan(_facts(gpus=_gpus("1db5", 8), kernel_modules="open"))["action"] == "blocked"
    assert FILTERS.driver_plan(_facts(gpus=_gpus("2901", 8), branch="550"))["action"] == "blocked"


def test_progress_without_a_terminal_prints_changes_and_failures(capsys: pytest.CaptureFixture[str]) -> None:
    from gpuenv.cli.provision_cmd import ProgressView

    view = ProgressView(enabled=True)
    with view:
        for progress in (
            Progress("h1", "Install torch", "changed"),
            Progress("h1", "Read facts", "ok"),
            Progress("h2", "Gathering Facts", "unreachable"),
            Progress("h1", "apt", "failed"),
        ):
            view.update(progress)
    err = capsys.readouterr().err.splitlines()
    assert err == ["h1: changed: Install torch", "h2: unreachable: Gathering Facts", "h1: failed: apt"]
    rows = view.board.rows
    assert rows["h1"]["ok"] == 1 and rows["h1"]["changed"] == 1 and rows["h1"]["state"] == "failed"


def _imports(module: str) -> set[str]:
    tree = ast.parse((REPO / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_ansible_room_sits_below_its_users_and_above_the_adapter() -> None:
    """The adapter runs Ansible for provision and fleet without knowing them; the room's pure
    modules run nothing (the loader alone reaches the adapter)."""
    users = ("gpuenv.provision", "gpuenv.fleet", "gpuenv.cli")
    adapter = _imports("gpuenv.adapters.ansible")
    assert not [m for m in adapter if m.startswith(users)], adapter
    for pure in ("inventory", "runner", "events", "hosts", "project"):
        imported = _imports(f"gpuenv.ansible.{pure}")
        assert not [m for m in imported if m.startswith((*users, "gpuenv.adapters"))], (pure, imported)
        assert "subprocess" not in imported, pure
    assert "gpuenv.adapters.ansible" in _imports("gpuenv.ansible.loader")
