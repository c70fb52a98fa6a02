"""Inventories load as Ansible reads them (ranges, group_vars/ and host_vars/, scripts, flow YAML),
through the real CLI; alias bombs and deep nesting are refused by the pre-scan before Ansible runs."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from tests.conftest import require, run_gpuenv

STACK = ("--os", "debian12", "--python", "3.11", "--torch", "2.13.0")


@pytest.fixture(autouse=True)
def _ansible_inventory() -> None:
    found = shutil.which("ansible-inventory", path=str(Path(sys.executable).parent)) or shutil.which(
        "ansible-inventory"
    )
    require(found is not None, "ansible-core is not installed (ansible-inventory)")


def render(inventory: Path, tmp_path: Path) -> dict[str, dict[str, object]]:
    project = tmp_path / "project"
    out = run_gpuenv("provision", "-i", str(inventory), *STACK, "--render-only", str(project))
    assert out.returncode == 0, out.stderr
    data = yaml.safe_load((project / "inventory/hosts.yml").read_text())
    hosts: dict[str, dict[str, object]] = data["all"]["hosts"]
    hosts["__groups__"] = {g: sorted(body["hosts"]) for g, body in data["all"].get("children", {}).items()}
    return hosts


def test_host_ranges_group_vars_and_host_vars_load(tmp_path: Path) -> None:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "host_vars").mkdir()
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu]\nnode[01:04]\n\n[fleet:children]\ngpu\n")
    (tmp_path / "group_vars" / "gpu.yml").write_text("ansible_user: ubuntu\nsite_note: '{{ not ours }}'\n")
    (tmp_path / "host_vars" / "node03.yml").write_text("ansible_port: 2203\n")
    hosts = render(inventory, tmp_path)
    assert sorted(h for h in hosts if h != "__groups__") == ["node01", "node02", "node03", "node04"]
    assert hosts["node01"]["ansible_user"] == "ubuntu" and hosts["node03"]["ansible_port"] == 2203
    assert "site_note" not in hosts["node01"]  # the user's own variables are not passed on
    assert hosts["__groups__"]["fleet"] == ["node01", "node02", "node03", "node04"]


def test_an_inventory_script_loads(tmp_path: Path) -> None:
    script = tmp_path / "inventory.py"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "if '--host' in sys.argv:\n    print('{}')\nelse:\n"
        "    print(json.dumps({'gpu': {'hosts': ['gpu01', 'gpu02'], 'vars': {'ansible_user': 'ubuntu'}},\n"
        "                      '_meta': {'hostvars': {'gpu02': {'ansible_port': 2202}}}}))\n"
    )
    script.chmod(0o755)
    hosts = render(script, tmp_path)
    assert hosts["gpu01"]["ansible_user"] == "ubuntu" and hosts["gpu02"]["ansible_port"] == 2202


def test_a_flow_style_yaml_inventory_loads(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("{all: {hosts: {gpu01: {ansible_port: 2201}, gpu02: {}}}}\n")
    hosts = render(inventory, tmp_path)
    assert hosts["gpu01"]["ansible_port"] == 2201 and "gpu02" in hosts


def test_a_hostile_value_in_group_vars_names_host_and_variable(tmp_path: Path) -> None:
    (tmp_path / "group_vars").mkdir()
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu]\ngpu01\n")
    (tmp_path / "group_vars" / "gpu.yml").write_text("ansible_user: \"{{ lookup('pipe', 'id') }}\"\n")
    out = run_gpuenv("provision", "-i", str(inventory), *STACK, "--render-only", str(tmp_path / "p"))
    assert out.returncode == 2 and "host gpu01, variable ansible_user" in out.stderr, out.stderr
    assert not (tmp_path / "p").exists()


def _alias_bomb(levels: int = 30) -> str:
    lines = ["all:", "  vars:", "    l0: &l0 [x, x]"]
    lines += [f"    l{i}: &l{i} [*l{i - 1}, *l{i - 1}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (_alias_bomb(), "aliases expand it"),
        ("all: &a\n  children:\n    g: *a\n", "refers to a node that contains it"),
        ("all:\n  vars:\n    x: " + "[" * 200 + "]" * 200 + "\n", "nesting deeper than"),
    ],
)
def test_alias_bombs_and_deep_nesting_are_refused_before_ansible(tmp_path: Path, text: str, needle: str) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(text)
    out = run_gpuenv("provision", "-i", str(inventory), *STACK, "--render-only", str(tmp_path / "p"), timeout=30)
    assert out.returncode == 2 and needle in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and "RecursionError" not in out.stderr


def test_an_alias_bomb_in_group_vars_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "group_vars").mkdir()
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("gpu01\n")
    (tmp_path / "group_vars" / "all.yml").write_text(_alias_bomb().replace("all:\n  vars:\n", "v:\n"))
    out = run_gpuenv("provision", "-i", str(inventory), *STACK, "--render-only", str(tmp_path / "p"), timeout=30)
    assert out.returncode == 2 and "aliases expand it" in out.stderr, out.stderr
