"""The figures checks report, named once: what fleet comparison, baselines and cost read.

A check puts its figures in its result's `metrics`: a per-GPU figure as `{cuda index: value}`
(the index as the check's process saw it; the report's `host.gpus[].cuda_index` maps it to the
GPU's UUID and serial), a per-node figure as a number. Registering a figure here is what makes
`fleet report` judge it for outliers, `fleet baseline learn` learn it and `--baseline` files
(the `figures` table) give it an expected value — no format change per new check.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from gpuenv.types import SITE_PREFIX

Better = Literal["higher", "lower"]


@dataclass(frozen=True)
class Figure:
    check: str
    metric: str  # key in the check's metrics
    unit: str
    better: Better
    per_gpu: bool = True
    mad_floor: float = 0.0  # absolute floor of the MAD in `unit` (integer temperatures often give MAD 0)
    mad_floor_rel: float = 0.01  # floor of the MAD as a share of the median

    @cached_property
    def name(self) -> str:  # one string for all the reports a fleet report reads
        return f"{self.check}.{self.metric}"

    def worse(self, value: float, than: float) -> bool:
        return value < than if self.better == "higher" else value > than


FIGURES: tuple[Figure, ...] = (
    Figure("amp", "matmul_tflops", "TFLOP/s", "higher"),
    Figure("amp", "energy_per_step_j", "J", "lower"),
    # a run across nodes: this node's own ranks among themselves, and one rank per node across them
    Figure("allreduce", "intra_node_busbw_gbps", "GB/s", "higher", per_gpu=False),
    Figure("allreduce", "inter_node_busbw_gbps", "GB/s", "higher", per_gpu=False),
    # NVML reads whole degrees: a cool group often has MAD 0, so one degree is the least spread.
    Figure("nvml", "temperature_c", "°C", "lower", mad_floor=1.0),
    Figure("nvml", "sm_clock_mhz", "MHz", "higher"),  # read under load; idle clocks say nothing
    Figure("models", "cv_images_per_s", "images/s", "higher"),
    Figure("models", "cv_compute_images_per_s", "images/s", "higher"),  # each rank's own, without the allreduce
    Figure("models", "cv_images_per_s_total", "images/s", "higher", per_gpu=False),
    Figure("models", "cv_scaling_efficiency", "ratio", "higher", per_gpu=False),
    Figure("models", "nlp_tokens_per_s", "tokens/s", "higher"),
    Figure("models", "rec_queries_per_s", "queries/s", "higher", per_gpu=False),
    Figure("models", "rec_p50_ms", "ms", "lower", per_gpu=False),
    Figure("models", "rec_p99_ms", "ms", "lower", per_gpu=False),
    Figure("models", "cv_step_j", "J", "lower"),
    Figure("models", "nlp_step_j", "J", "lower"),
    Figure("models", "cv_images_per_j", "images/J", "higher"),
    Figure("models", "nlp_tokens_per_j", "tokens/J", "higher"),
    Figure("models", "rec_batch_j", "J", "lower"),
    Figure("models", "rec_queries_per_j", "queries/J", "higher", per_gpu=False),
    Figure("fp8", "fp8_tflops", "TFLOP/s", "higher"),
    Figure("compile", "compile_speedup", "x", "higher", per_gpu=False),
    Figure("onnx", "onnx_latency_ms", "ms", "lower", per_gpu=False),
)
BY_NAME: Mapping[str, Figure] = {f.name: f for f in FIGURES}
_BY_CHECK: Mapping[str, tuple[Figure, ...]] = {
    c: tuple(f for f in FIGURES if f.check == c) for c in {f.check for f in FIGURES}
}


@dataclass(frozen=True)
class Reading:
    figure: Figure
    value: float
    gpu_index: int | None  # the check's cuda index; None for a per-node figure


def readings(checks: list[dict[str, Any]]) -> Iterator[Reading]:
    """Every registered figure in a report's checks (as plain dicts); malformed values are skipped."""
    for figure, values in series(checks):
        for index, value in values.items():
            yield Reading(figure, float(value), index)


def series(checks: list[dict[str, Any]]) -> Iterator[tuple[Figure, dict[int | None, float]]]:
    """Each registered figure a check reported, with all its values at once ({cuda index: value},
    or {None: value} for a per-node figure): what readings yields one by one, for bulk readers.
    A site check's figures are the ones it declared (the check's `figures`)."""
    for check in checks:
        metrics = check.get("metrics") or {}
        for figure in _BY_CHECK.get(check.get("name"), ()) or declared(check):  # type: ignore[arg-type]
            if figure.metric not in metrics:
                continue
            raw = metrics[figure.metric]
            if figure.per_gpu and isinstance(raw, dict):
                values = _per_gpu(raw)
                if values:
                    yield figure, values
            elif not figure.per_gpu and is_number(raw):
                yield figure, {None: float(raw)}


def declared(check: Mapping[str, Any]) -> tuple[Figure, ...]:
    """The figures a site check (site.NAME) declared with its result: {metric: {unit, better, per_gpu}}.
    Only a site check declares its own: gpuenv's are the registered ones."""
    name = str(check.get("name"))
    if not name.startswith(SITE_PREFIX):
        return ()
    return tuple(
        Figure(name, metric, str(d["unit"]), d["better"], per_gpu=bool(d["per_gpu"]))
        for metric, d in (check.get("figures") or {}).items()
    )


_NUMBER_TYPES = frozenset((int, float))  # by exact type: a bool is an int, and no figure


def _per_gpu(raw: dict[Any, Any]) -> dict[int | None, float]:
    """{cuda index: value} of the well-formed entries. A report's are all well formed: that case is
    checked and converted without a Python step per value (fleet reports read ten thousand)."""
    keys, values = list(map(str, raw)), list(raw.values())
    try:
        if set(map(type, values)) <= _NUMBER_TYPES and all(map(str.isdigit, keys)) and all(map(math.isfinite, values)):
            return dict(zip(map(int, keys), values, strict=True))
    except OverflowError:  # an integer too large for a float: not a figure
        pass
    return {int(i): float(v) for i, v in zip(keys, values, strict=True) if i.isdigit() and is_number(v)}


def is_number(value: object) -> bool:
    """A finite number that fits a float (not NaN, not a bool)."""
    if type(value) is int:
        return abs(value) < 1 << 1023
    return type(value) is float and math.isfinite(value)
