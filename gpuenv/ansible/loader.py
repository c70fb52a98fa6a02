"""The room's impure step: a `Hosts` value becomes a validated inventory and the become password.

A user's inventory is loaded as Ansible reads it: gpuenv pre-scans its files (cheap and bounded:
every YAML file Ansible would parse), runs `ansible-inventory --list` through
gpuenv.adapters.ansible (so host ranges, group_vars/ and host_vars/, inventory scripts and plugins
work as they do in Ansible), and hands the output to the pure gpuenv.ansible.inventory, which
validates every value gpuenv passes on. The become password comes from a private file or a prompt.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from gpuenv import validate
from gpuenv.adapters.ansible import list_inventory
from gpuenv.ansible.hosts import Hosts
from gpuenv.ansible.inventory import (
    Inventory,
    hosts_from_args,
    inventory_from_ansible,
    prescan_yaml,
    with_become,
    with_defaults,
)
from gpuenv.errors import BadRequest
from gpuenv.files import read_bytes

INVENTORY_TIMEOUT_S = 900.0  # ansible-inventory on 100k INI hosts takes about 30 s here
MAX_VARS_FILES = 10_000


def load_inventory(path: Path, *, timeout_s: float = INVENTORY_TIMEOUT_S) -> Inventory:
    """A user's inventory as Ansible reads it (INI, YAML, host ranges, group_vars/ and host_vars/,
    inventory scripts and plugins), after a bounded pre-scan of every YAML file Ansible would parse,
    and with every value gpuenv passes on validated."""
    source = str(path)
    if not os.access(path, os.X_OK):  # a script is run by Ansible, not parsed: nothing to pre-scan
        prescan_yaml(read_bytes(path, "inventory", kind="inventory"), source)
    for extra in _vars_files(path.parent):
        prescan_yaml(read_bytes(extra, "inventory variables file", kind="inventory"), str(extra))
    return inventory_from_ansible(list_inventory(path, timeout_s=timeout_s), source=source)


def _vars_files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for name in ("group_vars", "host_vars"):
        base = folder / name
        if base.is_dir():
            found += sorted(p for p in base.rglob("*") if p.is_file())[:MAX_VARS_FILES]
    return found


def inventory_for(hosts: Hosts) -> Inventory:
    """The hosts (arguments or inventory) with their SSH defaults and become settings, validated."""
    if hosts.names and hosts.inventory_file:
        raise BadRequest("give HOST arguments or -i INVENTORY, not both", hint="put every host in the inventory")
    if hosts.inventory_file is not None:
        inventory = load_inventory(validate.existing_file(str(hosts.inventory_file), "inventory"))
    else:
        inventory = hosts_from_args(hosts.names)
    key = hosts.ssh_key
    if key is not None:
        key = validate.existing_file(validate.safe_path(str(key), "--ssh-key"), "--ssh-key").resolve()
    defaults = {
        "ansible_user": hosts.user or "root",
        "ansible_port": hosts.port,
        "ansible_ssh_private_key_file": str(key) if key is not None else None,
    }
    return with_become(with_defaults(inventory, defaults), method=hosts.become_method)


def become_password(hosts: Hosts, prompt: Callable[[str], str]) -> str | None:
    """From a private file (mode 0600) or the prompt; never from the command line or the environment."""
    path, ask = hosts.become_password_file, hosts.ask_become_pass
    if path is not None and ask:
        raise BadRequest("--become-password-file and --ask-become-pass exclude each other", hint="use one")
    if ask:
        return prompt("BECOME password")
    if path is None:
        return None
    file = validate.private_file(str(path), "--become-password-file")
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRequest(
            f"cannot read --become-password-file: {type(exc).__name__}", hint="give a readable file"
        ) from exc
    if not lines or not lines[0]:
        raise BadRequest("--become-password-file is empty", hint="write the password on its first line")
    return lines[0]
