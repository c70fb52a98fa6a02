"""`gpuenv tune power`, the pure half: which caps to try, what each measured, which cap to keep,
and the state file's content (what must be put back).

No NVML, no torch, no files here: the service (gpuenv/power/service.py) does the I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

STATE_SCHEMA = "gpuenv.power-state/1"
RESULT_SCHEMA = "gpuenv.tune-power/1"
Phase = Literal["tuning", "applied"]


@dataclass(frozen=True)
class GpuLimits:
    """A GPU as NVML gives its power management: the range, the default and the limit in force (W)."""

    index: int
    uuid: str | None
    name: str | None
    min_w: float
    max_w: float
    default_w: float | None
    original_w: float


def caps(gpu: GpuLimits, steps: int) -> list[float]:
    """`steps` limits evenly across the GPU's allowed range, whole watts, highest first; the
    original limit is always among them, so the choice is measured against where the GPU was."""
    if steps < 2 or gpu.max_w <= gpu.min_w:
        points = [gpu.max_w]
    else:
        span = gpu.max_w - gpu.min_w
        points = [gpu.max_w - span * i / (steps - 1) for i in range(steps)]
    whole = {min(max(round(p), gpu.min_w), gpu.max_w) for p in points}
    return sorted(whole | {gpu.original_w}, reverse=True)


@dataclass(frozen=True)
class CapResult:
    """The NLP step measured at one power limit."""

    limit_w: float
    tokens: int
    seconds: float
    tokens_per_s: float
    energy_j: float | None  # over the measured call; None where neither counter nor samples could say
    watts: float | None
    energy_source: str | None  # "energy counter", "power samples", or None
    tokens_per_j: float | None  # None on the CPU: a GPU's joules do not pay for CPU tokens


def cap_result(limit_w: float, measured: dict[str, Any], *, on_gpu: bool) -> CapResult:
    """A cap's figures from the workload's answer (tokens, seconds, wall_s, energy_j, energy_source)."""
    energy = measured.get("energy_j")
    wall = float(measured["wall_s"])
    watts = energy / wall if energy is not None and wall > 0 else None
    per_joule = measured["tokens"] / energy if on_gpu and energy else None
    return CapResult(
        limit_w=limit_w,
        tokens=int(measured["tokens"]),
        seconds=float(measured["seconds"]),
        tokens_per_s=float(measured["tokens_per_s"]),
        energy_j=None if energy is None else round(float(energy), 3),
        watts=None if watts is None else round(watts, 1),
        energy_source=measured.get("energy_source"),
        tokens_per_j=None if per_joule is None else round(per_joule, 4),
    )


@dataclass(frozen=True)
class Choice:
    limit_w: float | None  # the most efficient cap within the allowed loss; None when none can be chosen
    reason: str
    loss: float | None = None  # throughput given up against the fastest cap, a fraction
    saving: float | None = None  # energy per token saved against the original limit, a fraction
    refused: str | None = None  # why no cap can be judged at all ("launch-bound"), else None


# At its highest cap a GPU that the NLP step loads draws most of its limit (BERT-base training in
# bf16 runs near the board power). Under this share the step is bound by kernel launches or the
# host, not the GPU: a lower cap would "save energy" by measuring nothing, so none is chosen.
LAUNCH_BOUND_SHARE = 0.5


def launch_bound(results: list[CapResult]) -> str | None:
    """Pure: why the sweep cannot choose a cap because the workload did not load the GPU, or None."""
    top = max(results, key=lambda r: r.limit_w)
    if top.watts is None or top.watts >= LAUNCH_BOUND_SHARE * top.limit_w:
        return None
    return (
        f"launch-bound: the GPU drew {top.watts:g} W under the workload at its {top.limit_w:g} W limit "
        f"({top.watts / top.limit_w:.0%}, under {LAUNCH_BOUND_SHARE:.0%}): the NLP step does not load it "
        "(kernel launches or the host set its pace), so no cap is chosen; run at --level standard or deep, "
        "check that nothing else holds the GPU (nvidia-smi, amd-smi process), and run gpuenv verify on this node"
    )


def choose(results: list[CapResult], *, max_loss: float, original_w: float) -> Choice:
    """The cap with the most tokens per joule among those within max_loss of the peak throughput."""
    if not results:
        return Choice(None, "nothing was measured")
    if any(r.tokens_per_j is None for r in results):
        return Choice(None, "tokens per joule unknown at some cap (CPU workload, or no energy reading): no cap chosen")
    bound = launch_bound(results)
    if bound is not None:
        return Choice(None, bound, refused="launch-bound")
    peak = max(r.tokens_per_s for r in results)
    allowed = [r for r in results if r.tokens_per_s >= (1 - max_loss) * peak]
    best = max(allowed, key=lambda r: (r.tokens_per_j or 0.0, r.tokens_per_s))
    loss = 1 - best.tokens_per_s / peak if peak else 0.0
    at_original = next((r for r in results if r.limit_w == original_w), None)
    saving = None
    if at_original is not None and at_original.tokens_per_j and best.tokens_per_j:
        saving = 1 - at_original.tokens_per_j / best.tokens_per_j  # joules per token, best against original
    reason = (
        f"{best.limit_w:g} W: {best.tokens_per_j:g} tokens/J, {loss:.1%} under the peak "
        f"{peak:.4g} tokens/s (allowed {max_loss:.1%})"
    )
    return Choice(best.limit_w, reason, round(loss, 4), None if saving is None else round(saving, 4))


@dataclass
class GpuTuning:
    """One GPU's run: its limits, each cap's figures, the choice, and where its limit ended."""

    gpu: GpuLimits
    results: list[CapResult] = field(default_factory=list)
    choice: Choice | None = None
    final_w: float | None = None  # the limit read back at the end

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self.gpu),
            "caps": [asdict(r) for r in self.results],
            "chosen_w": self.choice.limit_w if self.choice else None,
            "choice": asdict(self.choice) if self.choice else None,
            "final_w": self.final_w,
        }


# --- the state file: what must be put back ------------------------------------------------------


@dataclass(frozen=True)
class SavedLimit:
    index: int
    uuid: str | None
    original_mw: int
    applied_mw: int | None = None  # the cap --apply kept


MAX_GPUS = 1024
MAX_PID = 1 << 22  # Linux's pid_max ceiling
MAX_MW = 10_000_000  # 10 kW: no GPU's limit is near it; a larger figure is not one gpuenv wrote


def _saved_limit(gpu: Any, where: str) -> SavedLimit:
    if not isinstance(gpu, dict):
        raise ValueError(f"{where}: expected an object, got {_shown(gpu)}")
    uuid = gpu.get("uuid")
    if uuid is not None and not isinstance(uuid, str):
        raise ValueError(f"{where}.uuid: expected a string or null, got {_shown(uuid)}")
    applied = None if gpu.get("applied_mw") is None else _whole(gpu, "applied_mw", where, 1, MAX_MW)
    return SavedLimit(
        _whole(gpu, "index", where, 0, MAX_GPUS - 1), uuid, _whole(gpu, "original_mw", where, 1, MAX_MW), applied
    )


def _whole(data: dict[str, Any], key: str, where: str, least: int, most: int) -> int:
    """data[key], a whole number from least to most (never a bool, a float, NaN or Infinity)."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        name = f"{where}.{key}" if where else key
        raise ValueError(f"{name}: expected a whole number from {least} to {most}, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class PowerState:
    phase: Phase  # "tuning": a run is (or was, until it died) changing limits; "applied": a cap was kept
    pid: int
    started: str
    gpus: tuple[SavedLimit, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": STATE_SCHEMA, **asdict(self), "gpus": [asdict(g) for g in self.gpus]}

    @classmethod
    def from_dict(cls, data: Any) -> PowerState:
        """Raises ValueError, naming the field, when the content is not a state this gpuenv wrote."""
        if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
            raise ValueError(f"not a {STATE_SCHEMA} file")
        gpus = data.get("gpus")
        if not isinstance(gpus, list) or not gpus or len(gpus) > MAX_GPUS:
            raise ValueError(f"gpus: expected a list of 1 to {MAX_GPUS} GPUs, got {_shown(gpus)}")
        if data.get("phase") not in ("tuning", "applied"):
            raise ValueError(f"phase: expected 'tuning' or 'applied', got {_shown(data.get('phase'))}")
        if not isinstance(data.get("started"), str):
            raise ValueError(f"started: expected a string, got {_shown(data.get('started'))}")
        saved = tuple(_saved_limit(g, f"gpus[{i}]") for i, g in enumerate(gpus))
        return cls(data["phase"], _whole(data, "pid", "", 1, MAX_PID), data["started"], saved)

    def describe(self) -> str:
        changed = ", ".join(
            f"GPU {g.index} (original {g.original_mw / 1000:g} W"
            + (f", kept at {g.applied_mw / 1000:g} W" if g.applied_mw is not None else "")
            + ")"
            for g in self.gpus
        )
        what = "a cap kept by --apply" if self.phase == "applied" else f"a tune power run (pid {self.pid})"
        return f"{what} changed the power limit of {changed}"
