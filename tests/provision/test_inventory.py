"""Inventories as Ansible reads them (ansible-inventory), values validated, injection refused;
errors name the host and the variable."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from gpuenv.ansible.inventory import Inventory, hosts_from_args, render_inventory, with_become, with_defaults
from gpuenv.ansible.loader import load_inventory
from gpuenv.errors import BadRequest
from tests.conftest import require


@pytest.fixture(autouse=True)
def _ansible_inventory() -> None:
    found = shutil.which("ansible-inventory") or shutil.which(
        "ansible-inventory", path=str(Path(sys.executable).parent)
    )
    require(found is not None, "ansible-core is not installed (ansible-inventory)")


def parse_inventory(text: str, *, source: str, folder: Path | None = None) -> Inventory:
    """Write the text where Ansible can read it (the name keeps its extension), then load it."""
    import tempfile

    base = folder or Path(tempfile.mkdtemp(prefix="gpuenv-inv-"))
    path = base / source
    path.write_text(text)
    return load_inventory(path)


INI = """\
# fleet
[rack1]
gpu01 ansible_host=10.0.0.1 ansible_port=2201
gpu02 ansible_host=10.0.0.2

[rack2]
gpu03

[rack1:vars]
ansible_user=ubuntu

[all:vars]
ansible_python_interpreter=/usr/bin/python3

[fleet:children]
rack1
rack2
"""

YAML = """\
all:
  vars:
    ansible_user: ubuntu
  children:
    rack1:
      hosts:
        gpu01:
          ansible_host: 10.0.0.1
          ansible_port: 2201
        gpu02: {}
    rack2:
      hosts:
        gpu03:
          ansible_user: root
"""


def test_ini_groups_vars_and_children() -> None:
    inv = parse_inventory(INI, source="hosts.ini")
    hosts = {h.name: h.vars for h in inv.hosts}
    assert hosts["gpu01"] == {
        "ansible_host": "10.0.0.1",
        "ansible_port": 2201,
        "ansible_user": "ubuntu",
        "ansible_python_interpreter": "/usr/bin/python3",
    }
    assert "ansible_user" not in hosts["gpu03"]
    assert inv.groups["fleet"] == ("gpu01", "gpu02", "gpu03")
    assert inv.groups["rack2"] == ("gpu03",)


def test_yaml_group_vars_and_host_vars() -> None:
    inv = parse_inventory(YAML, source="hosts.yml")
    hosts = {h.name: h.vars for h in inv.hosts}
    assert hosts["gpu01"] == {"ansible_host": "10.0.0.1", "ansible_port": 2201, "ansible_user": "ubuntu"}
    assert hosts["gpu03"]["ansible_user"] == "root"
    assert inv.groups["rack1"] == ("gpu01", "gpu02")


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("[gpu]\ngpu01 ansible_port=99999\n", "host gpu01, variable ansible_port", "port"),
        ("[gpu]\ngpu01\ngpu_02\n", "", "invalid host"),
        (
            "[gpu]\ngpu01 ansible_ssh_common_args='-o ProxyCommand=sh'\n",
            "host gpu01, variable ansible_ssh_common_args",
            "unsupported variable",
        ),
        ("[gpu]\ngpu01 ansible_host={{lookup('pipe','id')}}\n", "host gpu01, variable ansible_host", "invalid host"),
        ("[gpu]\ngpu01 ansible_user='root;reboot'\n", "host gpu01, variable ansible_user", "invalid user"),
        ("[gpu\ngpu01\n", "", "Ansible cannot read the inventory"),
        ("[gpu:weird]\n", "", "Ansible cannot read the inventory"),
    ],
)
def test_ini_errors_name_the_host_and_variable(text: str, where: str, words: str) -> None:
    with pytest.raises(BadRequest) as err:
        parse_inventory(text, source="inv.ini")
    assert where in err.value.message and words in err.value.message, err.value.message


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        (
            "all:\n  hosts:\n    gpu01:\n      ansible_port: [1, 2]\n",
            "host gpu01, variable ansible_port",
            "plain value",
        ),
        (
            "all:\n  hosts:\n    gpu01:\n      ansible_become_password: x\n",
            "host gpu01, variable ansible_become_password",
            "unsupported variable",
        ),
        ("all:\n  hosts:\n    gpu01: {\n", "", "Ansible cannot read the inventory"),
        ("all:\n  hosts:\n    'bad host':\n", "", "invalid host"),
    ],
)
def test_yaml_errors_name_the_host_and_variable(text: str, where: str, words: str) -> None:
    with pytest.raises(BadRequest) as err:
        parse_inventory(text, source="inv.yml")
    assert where in err.value.message and words in err.value.message, err.value.message


def test_empty_inventory_is_refused() -> None:
    with pytest.raises(BadRequest, match="lists no hosts"):
        parse_inventory("# nothing\n", source="inv.ini")


def test_host_arguments_with_ports_and_bad_names() -> None:
    inv = hosts_from_args(["gpu01", "10.0.0.5:2222", "fe80::1"])
    assert [(h.name, h.vars) for h in inv.hosts] == [
        ("gpu01", {}),
        ("10.0.0.5", {"ansible_port": 2222}),
        ("fe80::1", {}),
    ]
    for bad in ("gpu01;reboot", "$(id)", "a b", "gpu01:0", ""):
        with pytest.raises(BadRequest):
            hosts_from_args([bad])


def test_defaults_fill_only_what_is_unset_and_become_follows_the_user() -> None:
    inv = parse_inventory(INI, source="hosts.ini")
    inv = with_become(with_defaults(inv, {"ansible_user": "root", "ansible_port": 22}), method="su")
    hosts = {h.name: h.vars for h in inv.hosts}
    assert hosts["gpu01"]["ansible_port"] == 2201 and hosts["gpu02"]["ansible_port"] == 22
    assert hosts["gpu01"]["ansible_become"] is True and hosts["gpu01"]["ansible_become_method"] == "su"
    assert hosts["gpu03"]["ansible_user"] == "root" and "ansible_become" not in hosts["gpu03"]


def test_rendered_inventory_is_yaml_ansible_reads_back() -> None:
    import yaml

    inv = with_defaults(parse_inventory(YAML, source="hosts.yml"), {"ansible_user": "root"})
    data = yaml.safe_load(render_inventory(inv))
    assert data["all"]["hosts"]["gpu01"]["ansible_port"] == 2201
    assert data["all"]["hosts"]["gpu03"]["ansible_user"] == "root"
    assert set(data["all"]["children"]["rack1"]["hosts"]) == {"gpu01", "gpu02"}
    # and gpuenv parses its own output to the same hosts
    again = parse_inventory(render_inventory(inv), source="rendered")
    assert {h.name: h.vars for h in again.hosts} == {h.name: h.vars for h in inv.hosts}
