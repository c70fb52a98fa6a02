"""The fleet report by host: which hosts need attention, worst first, what is wrong with each and what to do.

Pure, from a FleetReport. A host's outliers are grouped by figure (a slow interconnect makes one problem,
however many collectives and message sizes showed it), each said with its worst value against the median.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from gpuenv.fleet.report_model import BelowExpected, FleetReport, Gpu, Outlier, is_amd
from gpuenv.resources import data_file
from gpuenv.verify.catalogue import rules

# decimals per unit, so that a column of figures lines up (a unit not named here gets two)
DECIMALS = {"GB/s": 1, "TFLOP/s": 1, "°C": 0, "MHz": 0, "J": 3, "ratio": 2, "ms": 2, "images/J": 1}
COUNTS = ("images/s", "tokens/s", "queries/s")  # throughputs in the thousands: whole numbers
# what to do about an outlying figure, by figure (then by check)
OUTLIER_ADVICE = {
    "allreduce": "check the interconnect (nvidia-smi topo -m, nvidia-smi nvlink -s, the NICs), then rerun "
    "gpuenv verify --check allreduce",
    "nvml.temperature_c": "check the cooling (fans, airflow, inlet temperature); drain it if it keeps running hot",
    "nvml.sm_clock_mhz": "check clocks and power (nvidia-smi -q -d PERFORMANCE,POWER); drain it if it stays slow",
    "amp": "check clocks, power and cooling (nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE), then rerun "
    "gpuenv verify --level deep",
    "models": "rerun gpuenv verify --level deep; if it stays slow, drain it and compare with a healthy peer",
}
# the same advice on an AMD host, with AMD's tools (amd-smi) where NVIDIA's are named above
OUTLIER_ADVICE_AMD = {
    **OUTLIER_ADVICE,
    "allreduce": "check the interconnect (amd-smi xgmi, amd-smi topology, the NICs), then rerun "
    "gpuenv verify --check allreduce",
    "nvml.sm_clock_mhz": "check clocks and power (amd-smi metric --clock --power); drain it if it stays slow",
    "amp": "check clocks, power and cooling (amd-smi metric --clock --power --temperature), then rerun "
    "gpuenv verify --level deep",
}
NOT_CERTIFIED = "read its report (gpuenv verify --report) and rerun gpuenv verify on it"
UNREACHED = "reach the host (ssh, its BMC) and rerun gpuenv fleet verify"


def figure_text(value: float, unit: str) -> str:
    """A figure with its unit at the unit's fixed precision: 182.4 GB/s, 36 °C, 0.905 J."""
    decimals = 0 if unit in COUNTS else DECIMALS.get(unit, 2)
    return f"{value:,.{decimals}f} {unit}"


@dataclass(frozen=True)
class Problem:
    what: str  # what is wrong
    todo: str  # what to do
    kind: str  # "outcome", "failure", "outlier", "expected" (under the model's figure) or "flag"
    figure: str | None = None  # an outlier's figure, a failure's finding code

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "what": self.what, "todo": self.todo, "figure": self.figure}


@dataclass(frozen=True)
class HostAttention:
    host: str
    outcome: str
    problems: tuple[Problem, ...]
    worst: float  # the largest share an outlier lies from its median (0 without one)

    def severity(self) -> tuple[int, int, float]:
        failing = sum(p.kind in ("outcome", "failure") for p in self.problems)
        return (self.outcome != "certified", failing, self.worst)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "outcome": self.outcome, "problems": [p.to_dict() for p in self.problems]}


def attention(report: FleetReport) -> tuple[HostAttention, ...]:
    """Every host with something wrong (not certified, a failing finding, an outlier, a value under its
    model's expected figure, a doubt), worst first."""
    problems: dict[str, list[Problem]] = {}
    worst: dict[str, float] = {}
    for h in report.hosts:
        if not h.certified and not h.failures:
            todo = UNREACHED if h.outcome in ("unreachable", "timeout", "not provisioned") else NOT_CERTIFIED
            problems.setdefault(h.host, []).append(Problem(f"{h.outcome}, no failing finding named", todo, "outcome"))
        problems.setdefault(h.host, []).extend(Problem(f, "see why in the report's dates", "flag") for f in h.flags)
    amd_hosts = {h.host for h in report.hosts if is_amd(h.gpu_model)}
    for failure in report.failures:
        for host, gpus in failure.hosts:
            todo = _remediation(failure.code, amd=host in amd_hosts)
            problems.setdefault(host, []).append(Problem(f"{failure.code}{_on(gpus)}", todo, "failure", failure.code))
    for (host, figure), outlying in _by_host_and_figure(report.outliers).items():
        problems.setdefault(host, []).append(_outlier_problem(figure, outlying))
        worst[host] = max(worst.get(host, 0.0), *(_share(o) for o in outlying))
    for (host, figure), below in _by_host_and_figure(report.below_expected).items():
        problems.setdefault(host, []).append(_below_problem(figure, below))
        worst[host] = max(worst.get(host, 0.0), *(1 - b.share for b in below))
    outcomes = {h.host: h.outcome for h in report.hosts}
    hosts = [HostAttention(h, outcomes.get(h, "-"), tuple(p), worst.get(h, 0.0)) for h, p in problems.items() if p]
    return tuple(sorted(hosts, key=lambda a: (a.severity(), a.host), reverse=True))


def _remediation(code: str, *, amd: bool) -> str:
    """The catalogue's remediation; on an AMD host AMD SMI's where the nvml rule has one."""
    rule = rules().get(code)
    said = _amd_remediations().get(code) if amd else None
    return said or (rule.remediation if rule else None) or "see the finding in the host's report"


@cache
def _amd_remediations() -> dict[str, str]:
    """The nvml rules' remediations on AMD GPUs (gpuenv/data/amdsmi-policy.json), by finding code."""
    data = json.loads(data_file("amdsmi-policy.json").read_text())
    return {f"nvml.{name}": text for name, text in data["remediations"].items()}


def _on(gpus: tuple[Gpu, ...]) -> str:
    return f" on GPU {', '.join(str(g.cuda_index) for g in gpus)}" if gpus else ""


def _share(o: Outlier) -> float:
    return abs(o.value - o.median) / abs(o.median) if o.median else 0.0


Located = TypeVar("Located", Outlier, BelowExpected)


def _by_host_and_figure(found: Iterable[Located]) -> dict[tuple[str, str], list[Located]]:
    grouped: dict[tuple[str, str], list[Located]] = {}
    for o in found:
        grouped.setdefault((o.host, o.key.figure), []).append(o)
    return grouped


def _outlier_problem(figure: str, found: list[Outlier]) -> Problem:
    worst = max(found, key=_share)
    direction = "below" if worst.value < worst.median else "above"
    where = f"GPU {', '.join(sorted({str(o.gpu.cuda_index) for o in found if o.gpu}))} " if worst.gpu else ""
    detail = worst.key.metric().removeprefix(figure).strip()
    what = f"{figure} ({len(found)} values, worst {detail})" if len(found) > 1 and detail else worst.key.metric()
    said = (
        f"{where}{what}: {figure_text(worst.value, worst.unit)}, {_share(worst):.0%} {direction} "
        f"the median {figure_text(worst.median, worst.unit)}"
    )
    return Problem(said, _advice(figure, worst.key.gpu_model), "outlier", figure)


def _below_problem(figure: str, found: list[BelowExpected]) -> Problem:
    worst = min(found, key=lambda b: b.share)
    where = f"GPU {', '.join(sorted({str(b.gpu.cuda_index) for b in found if b.gpu}))} " if worst.gpu else ""
    e = worst.expected
    estimate = "" if e.confirmed else ", an estimate"
    said = (
        f"{where}{worst.key.metric()}: {figure_text(worst.value, worst.unit)}, {worst.share:.0%} of the "
        f"{figure_text(e.value, e.unit)} a healthy {e.model} reaches ({worst.severity}{estimate})"
    )
    return Problem(said, _advice(figure, worst.key.gpu_model), "expected", figure)


def _advice(figure: str, gpu_model: str) -> str:
    """What to do about a figure off its mark: by figure, then by check, with the GPU vendor's tools."""
    table = OUTLIER_ADVICE_AMD if is_amd(gpu_model) else OUTLIER_ADVICE
    return table.get(figure) or table.get(figure.split(".")[0], table["models"])
