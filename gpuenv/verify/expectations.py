"""What a healthy GPU of each model measures, before any recorded run (data in
gpuenv/data/gpu-expectations.json, every figure with its source): the dense matmul rate on the
amp check's one square shape, the device-to-device copy bandwidth and the allreduce busbw by GPU
count. A model matches a device name (NVML's, AMD SMI's or torch's) by prefix of the name normalised as the
KB's GPU table normalises it. An estimate (`confirmed: false`) can warn, never fail. The
recorded-run baselines (baselines.py) stay the tighter second line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from gpuenv.resources import data_file
from gpuenv.schema import load as load_data_file

Verdict = Literal["pass", "warn", "fail"]
Kind = Literal["matmul", "copy", "busbw"]
SATURATES = 512 << 20  # bytes: busbw saturates only from here; smaller messages measure latency, no model figure


def name_key(name: str) -> str:
    """A device name as the KB's GPU table compares names: lower case, no spaces, dashes or
    underscores, without an NVIDIA/Tesla/GeForce prefix ("NVIDIA A100-SXM4-80GB" -> "a100sxm480gb"),
    nor AMD's "AMD Instinct" before a market name ("AMD Instinct MI300X", AMD SMI's and torch's -> "mi300x")."""
    key = re.sub(r"[\s_-]+", "", name.lower())
    for prefix in ("nvidia", "tesla", "geforce", "amd", "instinct"):
        key = key.removeprefix(prefix)
    return key


@dataclass(frozen=True)
class Expected:
    model: str
    what: str  # "bf16 matmul at 8192x8192x8192", "device copy", "allreduce busbw, 8 GPUs (nvswitch)"
    value: float
    unit: str
    source: str
    confirmed: bool
    fail_below: float
    warn_below: float

    def verdict(self, measured: float) -> Verdict:
        """Under fail_below x the figure fails (an estimate only warns), under warn_below warns."""
        ratio = measured / self.value
        if ratio < self.fail_below:
            return "fail" if self.confirmed else "warn"
        return "warn" if ratio < self.warn_below else "pass"

    def text(self, measured: float) -> str:
        basis = "" if self.confirmed else ", an estimate"
        return (
            f"{measured:.0f} {self.unit} {self.what}, {measured / self.value:.0%} of the {self.value:g} {self.unit} "
            f"a healthy {self.model} reaches ({self.source}{basis})"
        )


@dataclass(frozen=True)
class Expectations:
    shape: str  # the one matmul shape the figures are for ("8192x8192x8192")
    judging: dict[str, dict[str, Any]]
    spread: float  # a member under this share of the node's median rate is named
    models: tuple[dict[str, Any], ...]

    def model(self, gpu_name: str) -> dict[str, Any] | None:
        key = name_key(gpu_name)
        for row in self.models:
            if _starts(key, row["match"]) and not _starts(key, row.get("exclude", ())):
                return row
        return None

    def matmul(self, gpu_name: str, dtype: str, shape: str) -> Expected | None:
        row = self.model(gpu_name)
        if row is None or shape != self.shape or row["matmul"]["dtype"] != dtype:
            return None
        figure = row["matmul"]
        return self._expected(row, "matmul", f"{dtype} matmul at {shape}", figure["tflops"], "TFLOP/s", figure)

    def copy(self, gpu_name: str) -> Expected | None:
        row = self.model(gpu_name)
        if row is None:
            return None
        return self._expected(row, "copy", "device memory copy", row["copy"]["gbps"], "GB/s", row["copy"])

    def busbw(self, gpu_name: str, gpus: int) -> Expected | None:
        """The lowest figure among the model's interconnects at this count: without a topology
        reading, a part that ships bridged or unbridged is judged as unbridged."""
        row = self.model(gpu_name)
        rows = [b for b in (row or {}).get("busbw", ()) if b["gpus"] == gpus]
        if row is None or not rows:
            return None
        low = min(rows, key=lambda b: b["gbps"])
        what = f"allreduce busbw on {gpus} GPUs ({low['interconnect']})"
        return self._expected(row, "busbw", what, low["gbps"], "GB/s", low)

    def _expected(
        self, row: dict[str, Any], kind: Kind, what: str, value: float, unit: str, figure: dict[str, Any]
    ) -> Expected:
        limits = self.judging[kind]
        return Expected(
            row["model"],
            what,
            float(value),
            unit,
            figure["source"],
            bool(figure["confirmed"]),
            float(limits["fail_below"]),
            float(limits["warn_below"]),
        )


def _starts(key: str, names: Any) -> bool:
    return any(key.startswith(name_key(n)) for n in names)


def load_expectations(path: Path | None = None) -> Expectations:
    """The package's table (read once per process), or a file in its format."""
    return _load(str(path or data_file("gpu-expectations.json")))


@cache
def _load(source: str) -> Expectations:
    data = load_data_file(source, "GPU expectations", "gpu-expectations")  # size cap, JSON Schema
    return Expectations(
        shape=data["shape"],
        judging=data["judging"],
        spread=float(data["spread"]["below_median"]),
        models=tuple(data["models"]),
    )
