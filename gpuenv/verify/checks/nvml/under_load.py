"""The GPUs read under load: a short-lived process keeps every visible GPU busy while the PCIe
links (which train down at idle) are re-read, and the clock-event reasons, SM clock, temperature
and power are sampled several times; NVML's violation counters are read once the load is confirmed
and again at the end of the sampling, so their growth is the time a limit held the GPU down under
load."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from gpuenv.adapters import nvml as adapter
from gpuenv.verify.facts import NvmlSnapshot

LOAD_READY_S = 30.0  # the load process imports torch and starts every GPU
LINK_POLL_S = 2.0  # links retrain within milliseconds of load; poll briefly for the maximum
ONE_SAMPLE = {"samples": 1, "interval_s": 0.0}


def read_links_under_load(
    snap: NvmlSnapshot,
    indices: list[int],
    load: contextlib.AbstractContextManager[str | None] | None,
    sampling: dict[str, Any] | None = None,
) -> str | None:
    """Re-read the PCIe generation of these GPUs (NVML index) while `load` keeps them busy,
    polling briefly until each reaches its maximum, then take `sampling` (samples, interval_s)
    readings of clocks, reasons, temperature and power; marks the GPUs' readings `under_load`.
    Returns why nothing could be read under load, or None."""
    if load is None:
        return "PCIe generation not judged: no GPU load on the CPU path (idle links train down)"
    by_index = {g["index"]: g for g in snap.gpus if g["index"] in indices}
    with load as problem:
        if problem:
            return f"PCIe generation not judged: no GPU load ({problem}); idle links train down"
        before = adapter.violation_times_ns(list(by_index))
        started = time.monotonic()
        gens = _links_at_max(by_index)
        samples = _samples(list(by_index), sampling or ONE_SAMPLE)
        sampled_s = time.monotonic() - started
        after = adapter.violation_times_ns(list(by_index))
    for i, gen in gens.items():
        gpu = by_index[i]
        gpu["pcie"].update(gen=gen, under_load=gen is not None)
        gpu["under_load"] = load_reading([s[i] for s in samples], before.get(i, {}), after.get(i, {}), sampled_s)
        gpu["sm_clock_under_load"] = gpu["under_load"]["sm_clock_median"]
    return None


def _links_at_max(by_index: dict[int, dict[str, Any]]) -> dict[int, int | None]:
    deadline = time.monotonic() + LINK_POLL_S
    while True:
        gens = adapter.pcie_generations(list(by_index))
        at_max = all(gen is None or gen >= (by_index[i]["pcie"].get("max_gen") or 0) for i, gen in gens.items())
        if at_max or time.monotonic() > deadline:
            return gens
        time.sleep(0.1)


def _samples(indices: list[int], sampling: dict[str, Any]) -> list[dict[int, dict[str, Any]]]:
    """`samples` readings of every GPU, `interval_s` apart (busy GPUs run at the clocks their
    cooling and power allow)."""
    taken = []
    for n in range(max(1, int(sampling["samples"]))):
        if n:
            time.sleep(float(sampling["interval_s"]))
        taken.append(adapter.load_sample(indices))
    return taken


def load_reading(
    samples: list[dict[str, Any]], before: dict[str, int], after: dict[str, int], sampled_s: float
) -> dict[str, Any]:
    """Pure: one GPU's readings under load, as rules judge them: each reason bit with the number
    of samples that asserted it, the SM clock's median and least, the violation counters' growth."""
    reasons = [s["clock_events"] for s in samples if isinstance(s.get("clock_events"), int)]
    clocks = [s["sm_clock"] for s in samples if isinstance(s.get("sm_clock"), int)]
    bits: dict[str, int] = {}
    for value in reasons:
        for bit in range(64):
            if value >> bit & 1:
                key = f"0x{1 << bit:x}"
                bits[key] = bits.get(key, 0) + 1
    return {
        "samples": len(samples),
        "sampled_s": round(sampled_s, 3),
        "reasons_read": len(reasons),
        "clock_events": bits,
        "sm_clock_median": int(_median(clocks)) if clocks else None,
        "sm_clock_min": min(clocks) if clocks else None,
        "temperature_max": _most(samples, "temperature"),
        "power_max_mw": _most(samples, "power_mw"),
        "violation_s": {name: round((after[name] - before[name]) / 1e9, 3) for name in after if name in before},
    }


def _median(values: list[int]) -> float:
    """statistics.median of a non-empty list (without importing statistics: its fractions and decimal
    would cost `--passive`, which imports this module, some 2 ms)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _most(samples: list[dict[str, Any]], key: str) -> int | None:
    values = [s[key] for s in samples if isinstance(s.get(key), int)]
    return max(values) if values else None


@contextlib.contextmanager
def gpu_load() -> Iterator[str | None]:
    """Every visible GPU busy in a short-lived process (gpuenv.verify.gpuload); yields None once
    the load is confirmed, else why not. The process is gone when the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuenv.verify.gpuload", str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], LOAD_READY_S)
        line = proc.stdout.readline().strip() if ready else ""
        if line.startswith("ready"):
            yield None
        else:
            yield line.removeprefix("unavailable ") or f"the load process did not start within {LOAD_READY_S:g} s"
    finally:
        with contextlib.suppress(OSError):
            if proc.stdin:
                proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
