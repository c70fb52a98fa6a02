"""Inventories as values: hosts from the command line, Ansible's reading of a user's inventory
validated, connection defaults, and gpuenv's own inventory rendered. Pure: the loading that reads
files and runs ansible-inventory is gpuenv.ansible.loader.

A user's inventory never reaches the run as written: every value gpuenv passes on is validated
(host names, ports, users, paths), and gpuenv renders its own YAML inventory from the result. So a
template (`{{ lookup('pipe', ...) }}`) or a shell fragment in a value is refused before anything
runs, and errors name the host and the variable. `prescan_yaml` bounds the YAML aliases and
nesting of the files Ansible will parse, before it parses them.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from gpuenv import validate
from gpuenv.errors import BadRequest
from gpuenv.extras import needed

_GROUP = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}", re.ASCII)
_INTERPRETER = re.compile(r"(/[A-Za-z0-9_.+-]+)+|auto|auto_silent|auto_legacy|auto_legacy_silent", re.ASCII)
_HINT = "see docs/provision.md for the inventory format gpuenv accepts"
MAX_DEPTH = 64  # YAML nesting: an inventory ten groups deep needs about 25
ALIAS_BUDGET = 10_000  # nodes aliases may add beyond the size of the document itself


def _interpreter(value: str) -> str:
    if not _INTERPRETER.fullmatch(value):
        raise BadRequest(f"invalid Python interpreter: {value[:60]!r}", hint="an absolute path, e.g. /usr/bin/python3")
    return value


def _choice(*allowed: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in allowed:
            raise BadRequest(f"invalid value {value[:40]!r}", hint=f"one of: {', '.join(allowed)}")
        return value

    return check


def _boolean(value: str) -> bool:
    lowered = str(value).lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise BadRequest(f"invalid boolean {value[:20]!r}", hint="true or false")


# The host variables an inventory may set, each with its validator.
HOST_VARS: dict[str, Callable[[str], Any]] = {
    "ansible_host": validate.hostname,
    "ansible_port": validate.port,
    "ansible_user": validate.user,
    "ansible_ssh_private_key_file": lambda v: validate.safe_path(v, "SSH key path"),
    "ansible_python_interpreter": _interpreter,
    "ansible_connection": _choice("ssh", "local"),
    "ansible_become": _boolean,
    "ansible_become_method": _choice("sudo", "su"),
    "ansible_become_user": validate.user,
}


@dataclass(frozen=True)
class Host:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Inventory:
    hosts: tuple[Host, ...]
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)  # group -> its hosts (children included)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)

    def targets(self, limit: str | None) -> tuple[str, ...]:
        """The hosts a run is for: the inventory's, narrowed by a --limit of host and group names."""
        if not limit:
            return self.names
        wanted = set(limit.split(","))
        return tuple(n for n in self.names if n in wanted or any(n in self.groups.get(g, ()) for g in wanted))


def _check_var(name: str, value: Any) -> Any:
    check = HOST_VARS.get(name)
    if check is None:
        raise BadRequest(
            f"unsupported variable {name!r}",
            hint=f"gpuenv inventories set connection variables only: {', '.join(HOST_VARS)}",
        )
    if isinstance(value, (dict, list)) or value is None:
        raise BadRequest(f"{name} must be a plain value", hint=_HINT)
    return _checked(name, str(value).lower() if isinstance(value, bool) else str(value))


@functools.lru_cache(maxsize=65536)
def _checked(name: str, text: str) -> Any:
    """A fleet repeats its users, ports and interpreters: each distinct value is checked once."""
    return HOST_VARS[name](text)


def hosts_from_args(names: Iterable[str]) -> Inventory:
    """An inventory of the HOST arguments (each validated; a host may be HOST:PORT)."""
    hosts: dict[str, Host] = {}
    for raw in names:
        name, port = raw, None
        if raw.count(":") == 1:  # HOST:PORT; more colons is an IPv6 address
            name, port = raw.split(":")
        name = validate.hostname(name)
        host_vars: dict[str, Any] = {} if port is None else {"ansible_port": validate.port(port)}
        hosts[name] = Host(name, host_vars)
    if not hosts:
        raise BadRequest("no hosts given", hint="name hosts (gpuenv provision gpu01 gpu02) or give -i INVENTORY")
    return Inventory(tuple(hosts.values()), {})


def prescan_yaml(data: bytes, source: str) -> None:
    """Refuse YAML whose aliases or nesting would make any loader (Ansible's too) run away: a
    self-referencing alias, aliases expanding to more than the document plus ALIAS_BUDGET nodes,
    or nesting deeper than MAX_DEPTH. Reads libyaml's event stream only, so it is cheap. Text that
    is not YAML (an INI inventory) is left to Ansible."""
    with needed("yaml", "reading an inventory"):
        import yaml  # type: ignore[import-untyped]  # optional extra: PyYAML comes with ansible-core

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    starts = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
    ends = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    sizes: dict[str, int] = {}
    open_nodes: list[tuple[str | None, int]] = []
    nodes = events = 0
    try:
        for event in yaml.parse(data, Loader=loader):
            events += 1
            if isinstance(event, starts):
                open_nodes.append((event.anchor, nodes))
                nodes += 1
                if len(open_nodes) > MAX_DEPTH:
                    raise _refused(source, f"nesting deeper than {MAX_DEPTH} levels")
            elif isinstance(event, ends):
                anchor, start = open_nodes.pop()
                if anchor is not None:
                    sizes[anchor] = nodes - start
            elif isinstance(event, yaml.ScalarEvent):
                nodes += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            elif isinstance(event, yaml.AliasEvent):
                if any(anchor == event.anchor for anchor, _ in open_nodes):
                    raise _refused(source, f"alias *{event.anchor} refers to a node that contains it")
                nodes += sizes.get(event.anchor, 1)
                if nodes - events > ALIAS_BUDGET + events:
                    raise _refused(source, "aliases expand it to far more than the file holds")
    except yaml.YAMLError:
        return


def _refused(source: str, why: str) -> BadRequest:
    return BadRequest(f"inventory {source}: {why}", hint="write the groups out instead of aliasing them")


def inventory_from_ansible(data: Any, *, source: str) -> Inventory:
    """gpuenv's Inventory from `ansible-inventory --list` output, every passed-on value validated.

    Connection variables (HOST_VARS) are checked and carried into the inventory gpuenv renders;
    any other ansible_* variable is refused (it changes how Ansible connects or runs); variables
    of the user's own are not passed on. Errors name the host (or group) and the variable."""
    if not isinstance(data, dict) or not isinstance(data.get("_meta", {}), dict):
        raise BadRequest(f"inventory {source}: ansible-inventory gave no inventory", hint=_HINT)
    hostvars = data.get("_meta", {}).get("hostvars", {}) or {}
    members: dict[str, list[str]] = {}
    children: dict[str, list[str]] = {}
    order: dict[str, None] = {}
    for group, body in data.items():
        if group == "_meta" or not isinstance(body, dict):
            continue
        if group not in ("all", "ungrouped") and not _GROUP.fullmatch(group):
            raise BadRequest(f"inventory {source}: invalid group name {group[:40]!r}", hint="letters, digits and _")
        members[group] = [str(h) for h in body.get("hosts", [])]
        children[group] = [str(c) for c in body.get("children", [])]
        order.update(dict.fromkeys(members[group]))
    order.update(dict.fromkeys(str(h) for h in hostvars))
    hosts = tuple(_host(name, hostvars.get(name) or {}, source) for name in order)
    if not hosts:
        raise BadRequest(f"inventory {source} lists no hosts", hint=_HINT)
    groups = {g: tuple(_members(g, members, children, {}, ())) for g in members if g not in ("all", "ungrouped")}
    return Inventory(hosts, groups)


def _host(name: str, values: dict[str, Any], source: str) -> Host:
    try:
        validate.hostname(name)
    except BadRequest as exc:
        raise BadRequest(f"inventory {source}: {exc.message}", hint=exc.hint) from None
    checked = {}
    for key, value in values.items():
        if key not in HOST_VARS and not key.startswith("ansible_"):
            continue  # the user's own variable: gpuenv's project never sees it
        try:
            checked[key] = _check_var(key, value)
        except BadRequest as exc:
            raise BadRequest(f"inventory {source}: host {name}, variable {key}: {exc.message}", hint=exc.hint) from None
    return Host(name, checked)


def _members(
    group: str,
    members: dict[str, list[str]],
    children: dict[str, list[str]],
    memo: dict[str, list[str]],
    path: tuple[str, ...],
) -> list[str]:
    if group in memo:
        return memo[group]
    if group in path:
        raise BadRequest(f"inventory: group {group!r} contains itself", hint=_HINT)
    found = dict.fromkeys(members.get(group, []))
    for kid in children.get(group, []):
        found.update(dict.fromkeys(_members(kid, members, children, memo, (*path, group))))
    memo[group] = list(found)
    return memo[group]


# --- defaults and rendering ------------------------------------------------------------------


def with_defaults(inventory: Inventory, defaults: dict[str, Any]) -> Inventory:
    """Fill connection variables the inventory leaves unset (from --user, --port, --ssh-key...)."""
    checked = {k: _check_var(k, v) for k, v in defaults.items() if v is not None}
    hosts = tuple(replace(h, vars={**checked, **h.vars}) for h in inventory.hosts)
    return replace(inventory, hosts=hosts)


def with_become(inventory: Inventory, *, method: str) -> Inventory:
    """Turn privilege escalation on for hosts reached as a user other than root."""
    hosts = []
    for h in inventory.hosts:
        extra: dict[str, Any] = {}
        if h.vars.get("ansible_user", "root") != "root" and h.vars.get("ansible_connection") != "local":
            extra = {"ansible_become": True, "ansible_become_method": method}
        hosts.append(replace(h, vars={**extra, **h.vars}))
    return replace(inventory, hosts=tuple(hosts))


LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def connection_vars(host: Host) -> dict[str, Any]:
    """The host's variables, with a local connection for this machine (localhost, 127.0.0.1, ::1)
    where the inventory names neither a connection nor a port: Ansible would otherwise go over SSH to
    itself. A port (127.0.0.1:2222, --port) means an SSH server there: a container, a chroot, a tunnel."""
    address = str(host.vars.get("ansible_host", host.name)).lower()
    if address in LOCAL_NAMES and "ansible_connection" not in host.vars and "ansible_port" not in host.vars:
        return {**host.vars, "ansible_connection": "local"}
    return dict(host.vars)


def render_inventory(inventory: Inventory) -> str:
    """gpuenv's own inventory, as YAML (scalars written as JSON, which YAML reads the same)."""
    lines = ["# Written by gpuenv provision from validated values.", "all:", "  hosts:"]
    for host in inventory.hosts:
        values = connection_vars(host)
        lines.append(f"    {json.dumps(host.name)}:" + ("" if values else " {}"))
        lines += [f"      {key}: {json.dumps(value)}" for key, value in sorted(values.items())]
    if inventory.groups:
        lines.append("  children:")
        for group, members in sorted(inventory.groups.items()):
            lines.append(f"    {group}:")
            lines.append("      hosts:" + ("" if members else " {}"))
            lines += [f"        {json.dumps(m)}: {{}}" for m in members]
    return "\n".join(lines) + "\n"
