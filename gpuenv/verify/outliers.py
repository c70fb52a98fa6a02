"""Outliers inside one node, with one meaning everywhere (pure): a member whose rate for the same
work is under `spread` x the node's reference rate is named. The reference is the median of the
members (with two, the faster one: a median of two cannot say which is slow). A time is a rate
turned around (a pair's allreduce time: its rate is 1 / time), so "four times the others' time"
is "a quarter of their rate". The spread is policy: gpu-expectations.json's `spread.below_median`.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Outlier(Generic[K]):
    member: K
    value: float
    reference: float  # the median (or the faster of two), in the figure's own unit
    share: float  # the member's rate over the reference rate (under the spread)


def beyond_spread(
    values: Mapping[K, float], *, spread: float, better: Literal["higher", "lower"] = "higher"
) -> list[Outlier[K]]:
    """The members whose rate is under `spread` x the reference rate, in the mapping's order."""
    usable = {k: v for k, v in values.items() if v > 0}
    if len(usable) < 2:
        return []
    rates = {k: (v if better == "higher" else 1 / v) for k, v in usable.items()}
    reference_rate = max(rates.values()) if len(rates) == 2 else statistics.median(rates.values())
    reference = reference_rate if better == "higher" else 1 / reference_rate
    return [
        Outlier(k, usable[k], reference, rate / reference_rate)
        for k, rate in rates.items()
        if rate < spread * reference_rate
    ]
