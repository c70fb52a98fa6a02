"""The figures checks report, named once: what fleet comparison, baselines and cost read.

A check puts its figures in its result's `metrics`: a per-GPU figure as `{cuda index: value}`
(the index as the check's process saw it; the report's `host.gpus[].cuda_index` maps it to the
GPU's UUID and serial), a per-node figure as a number. Registering a figure here is what makes
`fleet report` judge it for outliers, `fleet baseline learn` learn it and `--baseline` files
(the `figures` table) give it an expected value — no format change per new check.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

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

    @property
    def name(self) -> str:
        return f"{self.check}.{self.metric}"

    def worse(self, value: float, than: float) -> bool:
        return value < than if self.better == "higher" else value > than


FIGURES: tuple[Figure, ...] = (
    Figure("amp", "matmul_tflops", "TFLOP/s", "higher"),
    Figure("amp", "energy_per_step_j", "J", "lower"),
    Figure("models", "cv_images_per_s", "images/s", "higher"),
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
    Figure("fp8", "fp8_tflops", "TFLOP/s", "higher"),
    Figure("compile", "compile_speedup", "x", "higher", per_gpu=False),
    Figure("onnx", "onnx_latency_ms", "ms", "lower", per_gpu=False),
)
BY_NAME: Mapping[str, Figure] = {f.name: f for f in FIGURES}


@dataclass(frozen=True)
class Reading:
    figure: Figure
    value: float
    gpu_index: int | None  # the check's cuda index; None for a per-node figure


def readings(checks: list[dict[str, Any]]) -> Iterator[Reading]:
    """Every registered figure in a report's checks (as plain dicts); malformed values are skipped."""
    for check in checks:
        metrics = check.get("metrics") or {}
        for figure in FIGURES:
            if figure.check != check.get("name") or figure.metric not in metrics:
                continue
            raw = metrics[figure.metric]
            if figure.per_gpu and isinstance(raw, dict):
                for index, value in raw.items():
                    if _number(value) and str(index).isdigit():
                        yield Reading(figure, float(value), int(index))
            elif not figure.per_gpu and _number(raw):
                yield Reading(figure, float(raw), None)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
