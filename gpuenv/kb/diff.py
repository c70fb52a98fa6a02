"""A readable diff between the knowledge base in use and a proposed one, naming the source of each change."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Change:
    kind: str  # "added" | "removed" | "changed"
    table: str
    key: str  # the row's key value ("2.15.0")
    field: str | None  # the changed field; None for a whole row
    old: Any
    new: Any
    source: str  # where the new value came from

    def line(self) -> str:
        what = f"{self.table} {self.key}"
        if self.kind == "added":
            return f"+ {what}: {_summary(self.new)}  [from {self.source}]"
        if self.kind == "removed":
            return f"- {what}: no longer derived; was {_summary(self.old)}  [{self.source}]"
        return f"~ {what} {self.field}: {_text(self.old)} → {_text(self.new)}  [from {self.source}]"


def diff_rows(
    table: str,
    key: str,
    old_rows: list[dict[str, Any]],
    new_rows: list[dict[str, Any]],
    sources: Mapping[str, Mapping[str, str]],
    absent_source: str,
) -> list[Change]:
    """Row-by-row changes of one table; `sources[row key][field]` names where a new value came from."""
    old = {str(r[key]): r for r in old_rows}
    new = {str(r[key]): r for r in new_rows}
    changes = []
    for name, row in new.items():
        where = sources.get(name, {})
        if name not in old:
            changes.append(Change("added", table, name, None, None, row, where.get(key, "upstream")))
            continue
        for field in dict.fromkeys([*old[name], *row]):
            if field != "checked" and old[name].get(field) != row.get(field):
                source = where.get(field, "the overlay and the derivation rules")
                changes.append(Change("changed", table, name, field, old[name].get(field), row.get(field), source))
    changes += [Change("removed", table, n, None, r, None, absent_source) for n, r in old.items() if n not in new]
    return changes


def _summary(row: Mapping[str, Any]) -> str:
    parts = [f"{k} {_text(row[k])}" for k in ("torchvision", "torchaudio", "builds", "default_build") if k in row]
    return ", ".join(parts) or _text(dict(row))


def _text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "[]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_text(v)}" for k, v in value.items()) + "}"
    return str(value)
