"""The price of a node's devices: `--price-per-hour`, or the config file's `[prices]` table by
instance type or by GPU model (gpuenv/verify/cost.py turns a price into cost figures). Apart from
the figures, so that reading the table costs a command nothing it does not use."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from gpuenv import config

Basis = Literal["node", "gpu"]


class PriceRow(NamedTuple):
    """One entry of the config file's [prices] table: a GPU model or an instance type."""

    name: str
    usd_per_hour: float
    where: str  # FILE:LINE, for the report's price source


@dataclass(frozen=True)
class Price:
    usd_per_hour: float  # for every device the run measured, together
    source: str  # where the figure came from, in words
    basis: Basis  # "node": one price for the node; "gpu": a GPU-hour price times the GPUs
    per_device: float | None = None  # a GPU-hour price that holds for every device (basis "gpu")

    def to_dict(self) -> dict[str, Any]:
        return {
            "usd_per_hour": self.usd_per_hour,
            "source": self.source,
            "basis": self.basis,
            "usd_per_gpu_hour": self.per_device,
        }


def gpu_price(table: Sequence[PriceRow], gpu_name: str) -> PriceRow | None:
    """The [prices] row for a GPU model: a key found in the GPU's name (case-insensitive), the
    longest such key winning, so "H100 NVL" beats "H100" on an H100 NVL."""
    found = [row for row in table if row.name.strip() and row.name.lower() in gpu_name.lower()]
    return max(found, key=lambda row: len(row.name), default=None)


def resolve_price(
    *,
    per_hour: float | None,
    instance_type: str | None,
    table: Sequence[PriceRow],
    gpu_names: Sequence[str | None],
) -> tuple[Price | None, str | None]:
    """The price of the measured devices, and a note when a price was looked for and not found.

    Order: --price-per-hour; else [prices] by --instance-type (exactly); else [prices] by the GPU
    model of every measured GPU (each must have one). Nothing found is no price, not a default."""
    if per_hour is not None:
        return Price(per_hour, "--price-per-hour", "node"), None
    if instance_type is not None:
        row = next((r for r in table if r.name == instance_type), None)
        if row is None:
            return None, f"no price for instance type {instance_type!r} in [prices]: no cost figures"
        return Price(row.usd_per_hour, f"[prices] {row.name} ({row.where})", "node"), None
    if not table or not gpu_names:
        return None, None
    rows = [gpu_price(table, name or "") for name in gpu_names]
    missing = sorted({str(name) for name, row in zip(gpu_names, rows, strict=True) if row is None})
    if missing:
        return None, f"no price in [prices] for {', '.join(missing)}: no cost figures"
    priced = [row for row in rows if row is not None]
    names = sorted({row.name for row in priced})
    total = sum(row.usd_per_hour for row in priced)
    uniform = priced[0].usd_per_hour if len(names) == 1 else None
    source = f"[prices] {', '.join(names)} × {len(priced)} GPU(s) ({priced[0].where})"
    return Price(round(total, 6), source, "gpu", uniform), None


def price_rows(settings: config.ConfigFile | None) -> tuple[PriceRow, ...]:
    """The config file's [prices] table as PriceRow entries, each with the line it is on (none without a file)."""
    if settings is None or "prices" not in settings.data:
        return ()
    prices = config.check_prices(settings, settings.data["prices"])
    return tuple(PriceRow(name, value, settings.where(("prices", name))) for name, value in prices.items())
