"""The shipped JSON Schemas use only what gpuenv's own validator implements.

gpuenv.schema implements the part of JSON Schema 2020-12 the schemas use (docs/knowledge-base.md
says why it is not the jsonschema package); a keyword it does not know would be ignored silently,
so a schema that starts using one fails here first. tests/hardening/test_inputs.py checks that the
two validators agree on documents.
"""

from __future__ import annotations

from typing import Any

from gpuenv import schema
from gpuenv.resources import data_file

VALIDATED = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "propertyNames", "items",
    "minItems", "maxItems", "minimum", "maximum", "exclusiveMinimum", "minLength", "maxLength", "pattern", "$ref",
}  # fmt: skip
ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description"}


def _keywords(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*(_keywords(item) for item in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = set(node)
    for key, value in node.items():
        children = value.values() if key in ("properties", "$defs") and isinstance(value, dict) else [value]
        found |= set().union(*(_keywords(child) for child in children)) if children else set()
    return found


def test_every_keyword_of_every_shipped_schema_is_one_the_validator_checks() -> None:
    names = sorted(p.name.removesuffix(".schema.json") for p in data_file("schemas").glob("*.schema.json"))
    assert names, "no schemas found"
    for name in names:
        unknown = _keywords(schema.schema(name)) - VALIDATED - ANNOTATIONS
        assert not unknown, f"{name}.schema.json uses {sorted(unknown)}, which gpuenv.schema does not check"


def test_the_keyword_walk_finds_a_keyword_the_validator_would_ignore() -> None:
    assert "oneOf" in _keywords({"properties": {"a": {"oneOf": [{"type": "string"}]}}})
