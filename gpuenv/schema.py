"""Every data file a user hands gpuenv is checked against a JSON Schema when it is loaded.

The schemas ship as data (gpuenv/data/schemas/NAME.schema.json, JSON Schema 2020-12) and are
read here by a small validator for the part of the standard they use: type, enum, const,
properties, required, additionalProperties, propertyNames, items, minItems, maxItems,
minimum, maximum, exclusiveMinimum, minLength, maxLength, pattern and local $ref. One mechanism
for the policy, baseline, stack and spec files, without a new dependency in the base install (a
Slurm prolog must not need an extra to refuse a bad policy); the test suite checks each schema
with the jsonschema package too. Numbers must be finite and booleans are not numbers, so
`NaN`, `"fast"` or `true` where a number belongs is exit 2 with the file and the key named.
"""

from __future__ import annotations

import json
import math
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

from gpuenv.errors import BadRequest
from gpuenv.files import read_text
from gpuenv.resources import data_file

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


class SchemaViolation(ValueError):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where or '(top level)'}: {problem}")
        self.where, self.problem = where, problem


@cache
def schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(data_file(f"schemas/{name}.schema.json").read_text(encoding="utf-8"))
    return loaded


def check(value: Any, name: str) -> None:
    """Raise SchemaViolation (naming the offending key) when `value` does not match schema `name`."""
    root = schema(name)
    _check(value, root, root, "")


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool) and kind not in ("boolean",):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, _TYPES[kind])


def _check(value: Any, node: dict[str, Any], root: dict[str, Any], where: str) -> None:
    if "$ref" in node:
        ref = node["$ref"].removeprefix("#/")
        target = root
        for part in ref.split("/"):
            target = target[part]
        _check(value, target, root, where)
        return
    kinds = node.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(value, k) for k in kinds):
            raise SchemaViolation(where, f"must be {' or '.join(kinds)}, not {_show(value)}")
    if "const" in node and value != node["const"]:
        raise SchemaViolation(where, f"must be {_show(node['const'])}, not {_show(value)}")
    if "enum" in node and value not in node["enum"]:
        raise SchemaViolation(where, f"must be one of {', '.join(map(str, node['enum']))}; not {_show(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _number(value, node, where)
    if isinstance(value, str):
        _string(value, node, where)
    if isinstance(value, list):
        _array(value, node, root, where)
    if isinstance(value, dict):
        _object(value, node, root, where)


def _number(value: float, node: dict[str, Any], where: str) -> None:
    if "minimum" in node and value < node["minimum"]:
        raise SchemaViolation(where, f"must be at least {node['minimum']}, not {_show(value)}")
    if "exclusiveMinimum" in node and value <= node["exclusiveMinimum"]:
        raise SchemaViolation(where, f"must be above {node['exclusiveMinimum']}, not {_show(value)}")
    if "maximum" in node and value > node["maximum"]:
        raise SchemaViolation(where, f"must be at most {node['maximum']}, not {_show(value)}")


def _string(value: str, node: dict[str, Any], where: str) -> None:
    if len(value) < node.get("minLength", 0):
        raise SchemaViolation(where, "is empty" if not value else f"is shorter than {node['minLength']}")
    if "maxLength" in node and len(value) > node["maxLength"]:
        raise SchemaViolation(where, f"is longer than {node['maxLength']} characters")
    if "pattern" in node and not re.search(node["pattern"], value):
        raise SchemaViolation(
            where, f"{_show(value)} is not allowed here ({node.get('description', 'see the schema')})"
        )


def _array(value: list[Any], node: dict[str, Any], root: dict[str, Any], where: str) -> None:
    if len(value) < node.get("minItems", 0):
        raise SchemaViolation(where, f"needs at least {node['minItems']} item(s)")
    if "maxItems" in node and len(value) > node["maxItems"]:
        raise SchemaViolation(where, f"holds more than {node['maxItems']} items")
    if "items" in node:
        for i, item in enumerate(value):
            _check(item, node["items"], root, f"{where}[{i}]")


def _object(value: dict[str, Any], node: dict[str, Any], root: dict[str, Any], where: str) -> None:
    def at(key: str) -> str:
        return f"{where}.{key}" if where else key

    for key in node.get("required", []):
        if key not in value:
            raise SchemaViolation(at(key), "is missing")
    properties = node.get("properties", {})
    extra = node.get("additionalProperties", True)
    for key, item in value.items():
        if "propertyNames" in node:
            try:
                _check(key, node["propertyNames"], root, at(key))
            except SchemaViolation as exc:
                raise SchemaViolation(at(key), f"is not a known key ({exc.problem})") from None
        if key in properties:
            _check(item, properties[key], root, at(key))
        elif extra is False:
            known = ", ".join(sorted(properties))
            raise SchemaViolation(at(key), f"is not a known key (known: {known})")
        elif isinstance(extra, dict):
            _check(item, extra, root, at(key))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number gpuenv accepts")


def parse_json(text: str) -> Any:
    """JSON without NaN/Infinity; nesting too deep for Python is a JSONDecodeError, not a crash."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None
    except ValueError as exc:
        raise json.JSONDecodeError(str(exc), text, 0) from None


def parse_toml(text: str) -> Any:
    """TOML (its decode errors are ValueErrors)."""
    if sys.version_info >= (3, 11):
        import tomllib  # novermin (3.11 on, as checked above); here, where a file is TOML: most commands read none
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found,no-redef]
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def load(path: Path | str, what: str, name: str, *, kind: str | None = None, hint: str | None = None) -> Any:
    """Read (size-capped), parse (JSON, or TOML for .toml) and check a user's data file; exit 2 on any problem."""
    hint = hint or f"see gpuenv/data/schemas/{name}.schema.json for the format"
    text = read_text(path, what, kind=kind, hint=hint)
    toml = str(path).endswith(".toml")
    try:
        data = parse_toml(text) if toml else parse_json(text)
    except ValueError as exc:
        raise BadRequest(f"{what} {path} is not valid {'TOML' if toml else 'JSON'}: {exc}", hint=hint) from None
    try:
        check(data, name)
    except SchemaViolation as exc:
        raise BadRequest(f"{what} {path}: {exc}", hint=hint) from None
    return data
