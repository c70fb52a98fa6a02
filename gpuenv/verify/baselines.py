"""Expected busbw, matmul throughput and any registered figure by GPU model (data in
gpuenv/data/baselines.json; figure names in gpuenv/verify/figures.py). A row may name the CPU architecture
it was measured on (`fleet baseline learn` writes it): it is then expected there only, as an H100 PCIe's
copy bandwidth behind a Grace CPU is not the same figure as behind an x86 one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuenv.errors import BadRequest
from gpuenv.platforms.arch import arch_name, machine
from gpuenv.resources import data_file
from gpuenv.schema import load as load_data_file

SCHEMA = "gpuenv.baselines/2"  # /2 adds the `figures` table
READABLE = ("gpuenv.baselines/1", SCHEMA)


@dataclass(frozen=True)
class Baselines:
    fail_below: float
    warn_below: float
    busbw: tuple[dict[str, Any], ...]
    matmul_tflops: tuple[dict[str, Any], ...]
    origin: str
    figures: tuple[dict[str, Any], ...] = ()
    cpu_arch: str | None = None  # the node's: rows of another architecture are not its expectation

    def expected_busbw(self, gpu_name: str, gpus: int, collective: str, nbytes: int) -> float | None:
        for row in self.busbw:
            if (
                row["collective"] == collective
                and row["gpus"] == gpus
                and nbytes >= row["min_bytes"]
                and self._matches(row, gpu_name)
            ):
                return float(row["busbw_gbps"])
        return None

    def expected_tflops(self, gpu_name: str, dtype: str, shape: str | None = None) -> float | None:
        """The expected TFLOP/s at this shape ("4096x4096x4096"); rows measured as the best of a
        shape sweep ("mamf") are not the figure of any one shape, so a shape never matches them."""
        for row in self.matmul_tflops:
            if row["dtype"] == dtype and self._matches(row, gpu_name) and (shape is None or row.get("shape") == shape):
                return float(row["tflops"])
        return None

    def expected_figure(self, figure: str, gpu_name: str, gpus: int | None = None) -> float | None:
        """The expected value of a registered figure ("amp.matmul_tflops") on this GPU model; a
        row with a GPU count matches only that count, one without matches any."""
        for row in self.figures:
            if row["figure"] == figure and self._matches(row, gpu_name) and row.get("gpus") in (None, gpus):
                return float(row["value"])
        return None

    def judge(self, measured: float, expected: float, better: str = "higher") -> str:
        """ "fail", "warn" or "pass" for a measurement against its expected value; for a figure
        where lower is better (latency, joules) the ratio is turned around."""
        ratio = measured / expected if better == "higher" else expected / measured if measured else 1.0
        if ratio < self.fail_below:
            return "fail"
        if ratio < self.warn_below:
            return "warn"
        return "pass"

    def _matches(self, row: dict[str, Any], gpu_name: str) -> bool:
        """Case-insensitive substrings: any of `match`, none of `exclude` (an "H200" row must not
        catch the H200 NVL, a 600 W part); and a row of one CPU architecture only on that one."""
        name = gpu_name.lower()
        if row.get("cpu_arch") not in (None, self.cpu_arch):
            return False
        return any(m.lower() in name for m in row["match"]) and not any(
            x.lower() in name for x in row.get("exclude", [])
        )


def load_baselines(path: Path | None = None, cpu_arch: str | None = None) -> Baselines:
    """The baselines of `path` (the shipped ones by default) as expected on `cpu_arch` (this machine's by default)."""
    source = path or data_file("baselines.json")
    try:
        data = load_data_file(source, "baselines", "baselines")  # size cap, JSON Schema (gpuenv.schema)
    except (OSError, ValueError) as exc:
        raise BadRequest(
            f"cannot read baselines {source}: {exc}",
            hint="give a JSON file in the format of gpuenv/data/baselines.json",
        ) from exc
    problem = _problem(data)
    if problem:
        raise BadRequest(
            f"bad baselines file {source}: {problem}", hint="see gpuenv/data/baselines.json for the format"
        )
    return Baselines(
        float(data["fail_below"]),
        float(data["warn_below"]),
        _architecture_first(data["busbw"]),
        _architecture_first(data["matmul_tflops"]),
        str(source),
        _architecture_first(data.get("figures", [])),
        arch_name(cpu_arch or machine()),
    )


def _architecture_first(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Rows that name a CPU architecture before those for any (a lookup takes the first match), each in file order."""
    return tuple(sorted(rows, key=lambda row: "cpu_arch" not in row))


def _problem(data: Any) -> str | None:
    if not isinstance(data, dict) or data.get("schema") not in READABLE:
        return f"schema must be {SCHEMA!r}"
    if not (0 < data.get("fail_below", 0) <= data.get("warn_below", 0) <= 1):
        return "want 0 < fail_below <= warn_below <= 1"
    needs = {
        "busbw": ("match", "gpus", "collective", "min_bytes", "busbw_gbps"),
        "matmul_tflops": ("match", "dtype", "tflops"),
        "figures": ("match", "figure", "value"),
    }
    for table, keys in needs.items():
        rows = data.get(table, [] if table == "figures" else None)
        if not isinstance(rows, list):
            return f"{table} must be a list"
        for i, row in enumerate(rows):
            missing = [k for k in keys if k not in row]
            if missing:
                return f"{table}[{i}] lacks {', '.join(missing)}"
            if not isinstance(row["match"], list) or not row["match"]:
                return f"{table}[{i}].match must be a non-empty list of names"
    return None
