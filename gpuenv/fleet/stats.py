"""Robust statistics over a fleet's figures, and the outlier rule (pure, no I/O).

A group (GPU model x GPU count x figure, and for bandwidth collective x message size) is
described by its median, MAD, 5th and 95th percentiles and size. A value is an outlier when its
modified z-score, 0.6745 (x - median) / MAD, lies beyond the threshold *and* it is at least a
relative floor away from the median, both in the figure's bad direction. The MAD has a floor per
figure (an absolute one, e.g. 1 °C for integer temperatures, and a share of the median, 1% for
rates), so a group whose values are all equal does not make every small difference an outlier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import sub

from gpuenv.verify.figures import Better

Z_SCALE = 0.6745  # makes the MAD of a normal distribution comparable to its standard deviation
DEFAULT_Z = 3.5  # Iglewicz and Hoaglin's cut-off for the modified z-score
DEFAULT_MIN_DEVIATION = 0.05
MIN_JUDGED = 8  # a group with values from fewer hosts is described, never judged


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mad: float
    p5: float
    p95: float
    lowest: float
    highest: float

    def worst(self, better: Better) -> float:
        """The value furthest on the bad side: if even it is no outlier, none is."""
        return self.lowest if better == "higher" else self.highest


@dataclass(frozen=True)
class Rule:
    """How far from the median a value must lie, in the bad direction, to be an outlier."""

    z: float = DEFAULT_Z
    min_deviation: float = DEFAULT_MIN_DEVIATION  # share of the median


def quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, interpolating linearly between neighbours (numpy's default)."""
    if not ordered:
        raise ValueError("quantile of no values")
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(values: Sequence[float]) -> Summary:
    ordered = sorted(values)
    median = quantile(ordered, 0.5)
    mad = quantile(sorted(map(abs, map(sub, ordered, repeat(median, len(ordered))))), 0.5)
    p5, p95 = quantile(ordered, 0.05), quantile(ordered, 0.95)
    return Summary(len(ordered), median, mad, p5, p95, ordered[0], ordered[-1])


def floored_mad(summary: Summary, *, mad_floor: float, mad_floor_rel: float) -> float:
    """The MAD used for z-scores: never under the figure's absolute floor nor its share of the median."""
    return max(summary.mad, mad_floor, mad_floor_rel * abs(summary.median))


def z_score(value: float, summary: Summary, mad: float) -> float:
    """The modified z-score; 0 when even the floored MAD is 0 (a figure without a floor, all values 0)."""
    return Z_SCALE * (value - summary.median) / mad if mad > 0 else 0.0


def threshold(summary: Summary, mad: float, better: Better, rule: Rule) -> float:
    """The value past which (on the bad side) both the z threshold and the relative floor hold."""
    if mad <= 0:
        return -math.inf if better == "higher" else math.inf
    by_z = rule.z * mad / Z_SCALE
    by_share = rule.min_deviation * abs(summary.median)
    reach = max(by_z, by_share)
    return summary.median - reach if better == "higher" else summary.median + reach


def is_outlier(value: float, summary: Summary, mad: float, better: Better, rule: Rule) -> bool:
    """Beyond the z threshold and the relative floor, on the bad side of the median."""
    limit = threshold(summary, mad, better, rule)
    return value < limit if better == "higher" else value > limit
