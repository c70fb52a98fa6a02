"""Inventories: hosts from the command line, or a user's INI/YAML inventory, checked line by line.

A user's inventory never reaches Ansible as written: it is parsed here, every value is validated
(host names, ports, users, paths), and gpuenv renders its own YAML inventory from the result. So a
template (`{{ lookup('pipe', ...) }}`) or a shell fragment in a value is refused before anything
runs, and errors name the line.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from gpuenv import validate
from gpuenv.errors import BadRequest

_GROUP = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}", re.ASCII)
_INTERPRETER = re.compile(r"(/[A-Za-z0-9_.+-]+)+|auto|auto_silent|auto_legacy|auto_legacy_silent", re.ASCII)
_HINT = "see docs/provision.md for the inventory format gpuenv accepts"


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


def _located(source: str, line: int | None, error: BadRequest) -> BadRequest:
    where = f"{source} line {line}" if line else source
    return BadRequest(f"inventory {where}: {error.message}", hint=error.hint or _HINT)


def _check_var(name: str, value: Any) -> Any:
    check = HOST_VARS.get(name)
    if check is None:
        raise BadRequest(
            f"unsupported variable {name!r}",
            hint=f"gpuenv inventories set connection variables only: {', '.join(HOST_VARS)}",
        )
    if isinstance(value, (dict, list)) or value is None:
        raise BadRequest(f"{name} must be a plain value", hint=_HINT)
    return check(str(value).lower() if isinstance(value, bool) else str(value))


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


def parse_inventory(text: str, *, source: str) -> Inventory:
    """Parse an Ansible inventory in YAML (a mapping with 'all' or groups) or INI form."""
    stripped = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("#", ";"))]
    looks_yaml = (
        bool(stripped) and not stripped[0].startswith("[") and (stripped[0].endswith(":") or stripped[0] == "---")
    )
    inventory = parse_yaml(text, source=source) if looks_yaml else parse_ini(text, source=source)
    if not inventory.hosts:
        raise BadRequest(f"inventory {source} lists no hosts", hint=_HINT)
    return inventory


# --- INI -------------------------------------------------------------------------------------


class _Builder:
    """Collects hosts, group memberships, group vars and children, then flattens them."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.host_vars: dict[str, dict[str, Any]] = {}
        self.members: dict[str, list[str]] = {}
        self.group_vars: dict[str, dict[str, Any]] = {}
        self.children: dict[str, list[str]] = {}
        self.lines: dict[str, int | None] = {}

    def group(self, name: str, line: int | None) -> str:
        if not _GROUP.fullmatch(name):
            raise _located(
                self.source, line, BadRequest(f"invalid group name {name[:40]!r}", hint="letters, digits and _ only")
            )
        self.members.setdefault(name, [])
        self.lines.setdefault(name, line)
        return name

    def host(self, name: str, group: str, values: dict[str, Any], line: int | None) -> None:
        try:
            name = validate.hostname(name)
            checked = {k: _check_var(k, v) for k, v in values.items()}
        except BadRequest as exc:
            raise _located(self.source, line, exc) from None
        self.host_vars.setdefault(name, {}).update(checked)
        if group != "all" and name not in self.members[group]:
            self.members[group].append(name)

    def var(self, group: str, key: str, value: Any, line: int | None) -> None:
        try:
            self.group_vars.setdefault(group, {})[key] = _check_var(key, value)
        except BadRequest as exc:
            raise _located(self.source, line, exc) from None

    def build(self) -> Inventory:
        for parent, kids in self.children.items():
            for kid in kids:
                if kid not in self.members:
                    raise _located(
                        self.source,
                        self.lines.get(parent),
                        BadRequest(f"group {parent!r} names an unknown child group {kid!r}", hint=_HINT),
                    )
        groups = {g: tuple(self._hosts_of(g, set())) for g in self.members if g not in ("all", "ungrouped")}
        hosts = []
        for name, own in self.host_vars.items():
            merged = dict(self.group_vars.get("all", {}))
            for group in self._groups_of(name):
                merged.update(self.group_vars.get(group, {}))
            merged.update(own)
            hosts.append(Host(name, merged))
        return Inventory(tuple(hosts), groups)

    def _hosts_of(self, group: str, seen: set[str]) -> list[str]:
        if group in seen:
            loop = BadRequest(f"group {group!r} contains itself", hint=_HINT)
            raise _located(self.source, self.lines.get(group), loop)
        found = list(self.members.get(group, []))
        for kid in self.children.get(group, []):
            found += [h for h in self._hosts_of(kid, seen | {group}) if h not in found]
        return found

    def _groups_of(self, host: str) -> list[str]:
        """Groups holding the host, parents before children, so the nearer group's vars win."""
        direct = [g for g, members in self.members.items() if host in members]
        order: list[str] = []

        def add_with_parents(group: str) -> None:
            for parent, kids in self.children.items():
                if group in kids and parent not in order:
                    add_with_parents(parent)
            if group not in order:
                order.append(group)

        for group in direct:
            add_with_parents(group)
        return order


def parse_ini(text: str, *, source: str) -> Inventory:
    b = _Builder(source)
    section, kind = b.group("ungrouped", None), "hosts"
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise _located(source, number, BadRequest(f"unterminated section header {line[:40]!r}", hint=_HINT))
            name, _, kind = line[1:-1].partition(":")
            kind = kind or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise _located(
                    source,
                    number,
                    BadRequest(f"unknown section kind {kind!r}", hint="[group], [group:vars] or [group:children]"),
                )
            section = b.group(name, number)
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise _located(source, number, BadRequest(f"cannot parse {line[:40]!r}: {exc}", hint=_HINT)) from None
        if kind == "children":
            if len(words) != 1:
                raise _located(source, number, BadRequest("a [group:children] line names one group", hint=_HINT))
            if not _GROUP.fullmatch(words[0]):
                raise _located(source, number, BadRequest(f"invalid group name {words[0][:40]!r}", hint=_HINT))
            b.children.setdefault(section, []).append(words[0])
        elif kind == "vars":
            key, eq, value = line.partition("=")
            if not eq:
                raise _located(source, number, BadRequest(f"expected key=value, got {line[:40]!r}", hint=_HINT))
            b.var(section, key.strip(), value.strip().strip("'\""), number)
        else:
            values = {}
            for word in words[1:]:
                key, eq, value = word.partition("=")
                if not eq:
                    bad = BadRequest(f"expected key=value after the host, got {word[:40]!r}", hint=_HINT)
                    raise _located(source, number, bad)
                values[key] = value
            b.host(words[0], section, values, number)
    return b.build()


# --- YAML ------------------------------------------------------------------------------------


def parse_yaml(text: str, *, source: str) -> Inventory:
    import yaml  # type: ignore[import-untyped]  # PyYAML comes with ansible-core

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise _located(source, line, BadRequest(f"not valid YAML: {exc.problem}", hint=_HINT)) from None
    except yaml.YAMLError as exc:
        raise _located(source, None, BadRequest(f"not valid YAML: {exc}", hint=_HINT)) from None
    b = _Builder(source)
    if root is None:
        return b.build()
    for name_node, group_node in _mapping(root, source, "the top level"):
        _yaml_group(b, str(name_node.value), group_node, source, name_node.start_mark.line + 1)
    return b.build()


def _mapping(node: Any, source: str, what: str) -> list[tuple[Any, Any]]:
    import yaml  # type: ignore[import-untyped]

    if isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null"):
        return []
    if not isinstance(node, yaml.MappingNode):
        raise _located(source, node.start_mark.line + 1, BadRequest(f"{what} must be a mapping", hint=_HINT))
    return list(node.value)


def _yaml_group(b: _Builder, name: str, node: Any, source: str, line: int) -> None:
    group = b.group(name, line)
    for key_node, value_node in _mapping(node, source, f"group {name!r}"):
        key, at = str(key_node.value), key_node.start_mark.line + 1
        if key == "hosts":
            for host_node, vars_node in _mapping(value_node, source, "hosts"):
                values = {}
                for k, v in _mapping(vars_node, source, f"host {host_node.value!r}"):
                    value = _scalar(v, source)
                    try:
                        _check_var(str(k.value), value)
                    except BadRequest as exc:
                        raise _located(source, k.start_mark.line + 1, exc) from None
                    values[str(k.value)] = value
                b.host(str(host_node.value), group, values, host_node.start_mark.line + 1)
        elif key == "vars":
            for var_node, val_node in _mapping(value_node, source, "vars"):
                b.var(group, str(var_node.value), _scalar(val_node, source), var_node.start_mark.line + 1)
        elif key == "children":
            for kid_node, kid_body in _mapping(value_node, source, "children"):
                kid = str(kid_node.value)
                _yaml_group(b, kid, kid_body, source, kid_node.start_mark.line + 1)
                b.children.setdefault(group, []).append(kid)
        else:
            unknown = BadRequest(f"unknown key {key!r} in group {name!r}", hint="hosts, vars or children")
            raise _located(source, at, unknown)


def _scalar(node: Any, source: str) -> Any:
    import yaml  # type: ignore[import-untyped]

    if not isinstance(node, yaml.ScalarNode):
        raise _located(source, node.start_mark.line + 1, BadRequest("expected a plain value", hint=_HINT))
    return node.value


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


def render_inventory(inventory: Inventory) -> str:
    """gpuenv's own inventory, as YAML (scalars written as JSON, which YAML reads the same)."""
    lines = ["# Written by gpuenv provision from validated values.", "all:", "  hosts:"]
    for host in inventory.hosts:
        lines.append(f"    {json.dumps(host.name)}:" + ("" if host.vars else " {}"))
        lines += [f"      {key}: {json.dumps(value)}" for key, value in sorted(host.vars.items())]
    if inventory.groups:
        lines.append("  children:")
        for group, members in sorted(inventory.groups.items()):
            lines.append(f"    {group}:")
            lines.append("      hosts:" + ("" if members else " {}"))
            lines += [f"        {json.dumps(m)}: {{}}" for m in members]
    return "\n".join(lines) + "\n"
