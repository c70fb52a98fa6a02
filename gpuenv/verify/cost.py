"""What a node's work costs: the user's price per hour over the throughput figures verify measured.

Pure: figures in (a report's checks, as plain dicts), cost figures out. A price is exactly what the
user gave — `--price-per-hour`, or the config file's `[prices]` table by instance type or by GPU
model — and without one there are no cost figures: never a made-up default.

Every cost is `price per hour / (units per hour) × amount`, for the units a figure counts:

| figure | cost | amount |
|---|---|---|
| `amp.matmul_tflops` (TFLOP/s) | USD per TFLOP/s-hour: one sustained TFLOP/s for an hour | 3600 TFLOP |
| `models.nlp_tokens_per_s` | USD per million training tokens | 10^6 tokens |
| `models.cv_images_per_s(_total)` | USD per thousand training images | 10^3 images |
| `models.rec_queries_per_s` | USD per million recommender queries | 10^6 queries |
| `fp8.fp8_tflops` | USD per FP8 TFLOP/s-hour | 3600 TFLOP |

A price covers every device the run measured (the node, or the GPUs a job was given). A per-GPU
figure is costed per device, at that device's share of the price, and for the node, over the sum
of the devices' rates.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuenv.verify.figures import BY_NAME, Reading, readings
from gpuenv.verify.prices import Price, resolve_price
from gpuenv.verify.prices import PriceRow as PriceRow  # the [prices] rows now live in prices.py
from gpuenv.verify.prices import price_rows as price_rows

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class CostRule:
    figure: str  # a registered figure (gpuenv/verify/figures.py) counting units per second
    key: str  # the cost's name in the report and in fleet tables
    unit: str
    amount: float  # the units one cost figure is for


# A node-wide figure comes before the per-GPU one of the same key: fleet tables take the first found.
RULES: tuple[CostRule, ...] = (
    CostRule("amp.matmul_tflops", "usd_per_tflop_hour", "USD per TFLOP/s-hour", SECONDS_PER_HOUR),
    CostRule("models.nlp_tokens_per_s", "usd_per_million_tokens", "USD per million training tokens", 1e6),
    CostRule("models.cv_images_per_s_total", "usd_per_thousand_images", "USD per thousand training images", 1e3),
    CostRule("models.cv_images_per_s", "usd_per_thousand_images", "USD per thousand training images", 1e3),
    CostRule("models.rec_queries_per_s", "usd_per_million_queries", "USD per million recommender queries", 1e6),
    CostRule("fp8.fp8_tflops", "usd_per_fp8_tflop_hour", "USD per FP8 TFLOP/s-hour", SECONDS_PER_HOUR),
)
COST_KEYS: tuple[str, ...] = tuple(dict.fromkeys(r.key for r in RULES))
KEY_UNITS: Mapping[str, str] = {r.key: r.unit for r in RULES}


def _significant(value: float) -> float:
    return float(f"{value:.4g}")


def _cost(price_per_hour: float, rate: float, amount: float) -> float:
    return _significant(price_per_hour * amount / (rate * SECONDS_PER_HOUR))


def cost_figures(checks: list[dict[str, Any]], price: Price) -> list[dict[str, Any]]:
    """One cost figure for every registered throughput figure the checks report (a zero rate has none)."""
    return costs_of(readings(checks), price)


def costs_of(found: Iterable[Reading], price: Price) -> list[dict[str, Any]]:
    by_figure: dict[str, list[Reading]] = {}
    for reading in found:
        if reading.value > 0:
            by_figure.setdefault(reading.figure.name, []).append(reading)
    return [_figure_cost(rule, by_figure[rule.figure], price) for rule in RULES if by_figure.get(rule.figure)]


def _figure_cost(rule: CostRule, rates: list[Reading], price: Price) -> dict[str, Any]:
    figure = BY_NAME[rule.figure]
    entry: dict[str, Any] = {"figure": rule.figure, "key": rule.key, "unit": rule.unit}
    if not figure.per_gpu:
        rate = rates[0].value
        return {**entry, "value": _cost(price.usd_per_hour, rate, rule.amount), "rate": rate, "rate_unit": figure.unit}
    share = price.per_device if price.per_device is not None else price.usd_per_hour / len(rates)
    total = sum(r.value for r in rates)
    return {
        **entry,
        "value": _cost(share * len(rates), total, rule.amount),
        "per_gpu": {str(r.gpu_index): _cost(share, r.value, rule.amount) for r in rates},
        "rate": _significant(total),
        "rate_unit": figure.unit,
    }


def report_cost(
    report: Mapping[str, Any], price: Price | None, *, instance_type: str | None = None
) -> dict[str, Any] | None:
    """The report's `cost` object, or None without a price."""
    if price is None:
        return None
    cost: dict[str, Any] = {
        "price": price.to_dict(),
        "instance_type": instance_type,
        "device": report.get("device"),
        "figures": cost_figures(list(report.get("checks", [])), price),
    }
    if report.get("device") == "cpu":
        cost["note"] = "measured on the CPU: what this price buys of the CPU's work, not of a GPU's"
    return cost


# --- the fleet's view: cost per instance type or GPU model, side by side --------------------------


@dataclass(frozen=True)
class GroupCost:
    """One kind of node in a fleet: its nodes, their price and the median of each cost figure."""

    group: str
    nodes: int
    priced_nodes: int
    usd_per_hour: float | None  # the median node price
    costs: Mapping[str, float]  # cost key -> median over the priced nodes
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_kind": self.group,
            "nodes": self.nodes,
            "priced_nodes": self.priced_nodes,
            "usd_per_hour": self.usd_per_hour,
            "costs": [{"key": k, "unit": KEY_UNITS[k], "value": v} for k, v in self.costs.items()],
            "note": self.note,
        }


@dataclass(frozen=True)
class NodeFigures:
    """What the fleet table needs of one node's latest report."""

    instance_type: str | None
    gpu_names: tuple[str, ...]
    readings: tuple[Reading, ...]

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> NodeFigures:
        host = report.get("host") or {}
        names = tuple(str(g.get("name") or "unknown GPU") for g in host.get("gpus") or [])
        checks = list(report.get("checks", []))
        return cls(host.get("instance_type") or None, names, tuple(readings(checks)))

    def group(self) -> str:
        """The node's kind: its instance type when given, else its GPUs ("8 × NVIDIA H100 ...")."""
        if self.instance_type:
            return self.instance_type
        if not self.gpu_names:
            return "no GPU"
        names = list(self.gpu_names)
        return " + ".join(f"{names.count(n)} × {n}" for n in dict.fromkeys(names))


def node_costs(node: NodeFigures, table: Sequence[PriceRow]) -> tuple[Price | None, dict[str, float], str | None]:
    """A node's price from [prices] (by its instance type, else its GPU models) and one value per cost key."""
    price, note = resolve_price(
        per_hour=None, instance_type=node.instance_type, table=table, gpu_names=list(node.gpu_names)
    )
    if price is None:
        return None, {}, note or "no price in [prices]"
    values: dict[str, float] = {}
    for entry in costs_of(node.readings, price):
        values.setdefault(entry["key"], entry["value"])  # RULES order: a node-wide figure first
    return price, values, None


def fleet_costs(nodes: Iterable[NodeFigures], table: Sequence[PriceRow]) -> list[GroupCost]:
    """Cost per node kind across a fleet (each node once, by its latest report), sorted by kind."""
    grouped: dict[str, list[tuple[Price | None, dict[str, float], str | None]]] = {}
    for node in nodes:
        grouped.setdefault(node.group(), []).append(node_costs(node, table))
    rows = []
    for group, members in sorted(grouped.items()):
        priced = [(p, c) for p, c, _ in members if p is not None]
        notes = sorted({n for _, _, n in members if n})
        costs = {
            key: _significant(statistics.median(vals))
            for key in COST_KEYS
            if (vals := [c[key] for _, c in priced if key in c])
        }
        price = statistics.median(p.usd_per_hour for p, _ in priced) if priced else None
        rows.append(GroupCost(group, len(members), len(priced), price, costs, "; ".join(notes) or None))
    return rows


def cost_table(rows: Sequence[GroupCost]) -> tuple[list[str], list[list[str]]]:
    """Columns and cells for a side-by-side table of fleet_costs (a dash where a figure is missing)."""
    keys = [k for k in COST_KEYS if any(k in r.costs for r in rows)]
    columns = ["node kind", "nodes", "USD/h", *[KEY_UNITS[k].removeprefix("USD ") for k in keys]]
    cells = []
    for row in rows:
        price = "-" if row.usd_per_hour is None else f"{row.usd_per_hour:g}"
        nodes = f"{row.priced_nodes}/{row.nodes}" if row.priced_nodes != row.nodes else str(row.nodes)
        cells.append([row.group, nodes, price, *[f"{row.costs[k]:.4g}" if k in row.costs else "-" for k in keys]])
    return columns, cells
