"""The GPUs read under load: a short-lived process keeps every visible GPU busy while the PCIe
links (which train down at idle) are re-read, and the clock-event reasons, SM clock, temperatures
and power are sampled several times (at the deep level for a minute, so a GPU that throttles only
once heat-soaked shows it); the violation counters are read once the load is confirmed and again at
the end of the sampling, so their growth is the time a limit held the GPU down under load. Every
call that fails under load is kept with its class (never dropped), and the load process says which
GPUs it runs on by PCI bus id (or UUID), so a GPU sampled but not loaded is named. One sampler for
both vendors: a LoadReader says how one vendor's library is read (NVML here; AMD SMI in amd.py),
and the reading it gives is the same shape, judged by load_rules.py."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuenv.adapters import nvml as adapter
from gpuenv.verify.facts import NvmlSnapshot
from gpuenv.verify.pci import same_bus

LOAD_READY_S = 30.0  # the load process imports torch and starts every GPU
LINK_POLL_S = 2.0  # links retrain within milliseconds of load; poll briefly for the maximum
LOAD_SLACK_S = 30.0  # the load outlives the sampling by this much (it also ends when its stdin closes)
ONE_SAMPLE = {"samples": 1, "interval_s": 0.0}


@dataclass(frozen=True)
class Load:
    """What the load process said when it started: why no load runs (None: it runs), and the GPUs
    it runs on ("pci:0000:18:00" or "uuid:..."; None where it did not say)."""

    problem: str | None = None
    gpus: tuple[str, ...] | None = None


# Starts the load the GPUs are read under, for the seconds the sampling holds it (gpu_load below)
LoadStarter = Callable[[float], contextlib.AbstractContextManager[Load]]


def hold_s(sampling: dict[str, Any]) -> float:
    """How long the sampling keeps the GPUs under load."""
    return max(0, int(sampling["samples"]) - 1) * float(sampling["interval_s"])


Counters = dict[str, int]
Grown = Callable[[Counters, Counters, float], dict[str, float]]


def ns_grown(before: Counters, after: Counters, sampled_s: float) -> dict[str, float]:
    """Pure: NVML's violation counters (ns a limit held the clocks down) as seconds grown."""
    return {name: round((after[name] - before[name]) / 1e9, 3) for name in after if name in before}


def _split(counters: dict[int, dict[str, Any]]) -> tuple[dict[int, Counters], dict[int, dict[str, Any]]]:
    """A reader's counters by GPU, and what it could not read of them."""
    values = {i: {k: v for k, v in c.items() if k != "unread"} for i, c in counters.items()}
    return values, {i: c.get("unread") or {} for i, c in counters.items()}


@dataclass(frozen=True)
class LoadReader:
    """How one vendor's library is read under load, by its GPU index: `sample` one reading of
    each GPU (clock_events: NVML's reason bits, or the names of the limits asserted; causes: the
    same in the one vocabulary both vendors share; sm_clock, temperature, memory_temperature,
    power_mw; unread), `counters` its violation counters (and their `unread`), `grown` the seconds
    each counter grew between two reads, `links` the PCIe generations ({"gen", "unread"}; None:
    not read); `not_judged` names what goes unjudged when no load runs, and `why` why that matters."""

    sample: Callable[[list[int]], dict[int, dict[str, Any]]]
    counters: Callable[[list[int]], dict[int, dict[str, Any]]]
    grown: Grown
    links: Callable[[list[int]], dict[int, dict[str, Any]]] | None
    not_judged: str
    why: str = ""


NVML_READER = LoadReader(
    sample=adapter.load_sample,
    counters=adapter.violation_times_ns,
    grown=ns_grown,
    links=adapter.pcie_generations,
    not_judged="PCIe generation not judged",
    why="idle links train down",
)


def read_links_under_load(
    snap: NvmlSnapshot,
    indices: list[int],
    load: contextlib.AbstractContextManager[Load] | None,
    sampling: dict[str, Any] | None = None,
    reader: LoadReader = NVML_READER,
) -> str | None:
    """Re-read the PCIe generation of these GPUs (the library's index) while `load` keeps them
    busy, polling briefly until each reaches its maximum, then take `sampling` (samples,
    interval_s) readings of clocks, reasons, temperatures and power; marks the GPUs' readings
    `under_load` and whether the load process ran on each (`loaded`). Returns why nothing could be
    read under load, or None."""
    if load is None:
        return f"{reader.not_judged}: no GPU load on the CPU path" + (f" ({reader.why})" if reader.why else "")
    by_index = {g["index"]: g for g in snap.gpus if g["index"] in indices}
    with load as started:
        if started.problem:
            return f"{reader.not_judged}: no GPU load ({started.problem})" + (f"; {reader.why}" if reader.why else "")
        before, before_unread = _split(reader.counters(list(by_index)))
        began = time.monotonic()
        gens = _links_at_max(by_index, reader.links) if reader.links else {}
        samples = _samples(list(by_index), sampling or ONE_SAMPLE, reader)
        sampled_s = time.monotonic() - began
        after, after_unread = _split(reader.counters(list(by_index)))
    for i, gpu in by_index.items():
        link = gens.get(i) or {}
        if "gen" in link:
            gpu.setdefault("pcie", {}).update(gen=link["gen"], under_load=link["gen"] is not None)
        samples_i = [s[i] for s in samples]
        unread = {**before_unread.get(i, {}), **after_unread.get(i, {}), **(link.get("unread") or {})}
        gpu["under_load"] = load_reading(
            samples_i, before.get(i, {}), after.get(i, {}), sampled_s, reader.grown, unread=unread
        )
        gpu["sm_clock_under_load"] = gpu["under_load"]["sm_clock_median"]
        gpu["loaded"] = None if started.gpus is None else any(_is(gpu, token) for token in started.gpus)
    return None


def _is(gpu: dict[str, Any], token: str) -> bool:
    """Whether the load process's name for a GPU ("pci:0000:18:00", "uuid:...") is this one."""
    kind, _, value = token.partition(":")
    if kind == "pci":
        return same_bus(gpu.get("pci_bus_id"), value)
    uuid = str(gpu.get("uuid") or "").lower().removeprefix("gpu-")
    return bool(uuid) and uuid == value.lower().removeprefix("gpu-")


def _links_at_max(
    by_index: dict[int, dict[str, Any]], links: Callable[[list[int]], dict[int, dict[str, Any]]]
) -> dict[int, dict[str, Any]]:
    deadline = time.monotonic() + LINK_POLL_S
    while True:
        gens = links(list(by_index))
        at_max = all(g["gen"] is None or g["gen"] >= (by_index[i]["pcie"].get("max_gen") or 0) for i, g in gens.items())
        if at_max or time.monotonic() > deadline:
            return gens
        time.sleep(0.1)


def _samples(indices: list[int], sampling: dict[str, Any], reader: LoadReader) -> list[dict[int, dict[str, Any]]]:
    """`samples` readings of every GPU, `interval_s` apart (busy GPUs run at the clocks their
    cooling and power allow)."""
    taken = []
    for n in range(max(1, int(sampling["samples"]))):
        if n:
            time.sleep(float(sampling["interval_s"]))
        taken.append(reader.sample(indices))
    return taken


def load_reading(
    samples: list[dict[str, Any]],
    before: Counters,
    after: Counters,
    sampled_s: float,
    grown: Grown = ns_grown,
    *,
    unread: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Pure: one GPU's readings under load, as rules judge them: each reason (NVML's bit, or the
    limit's name) and each cause with the number of samples that asserted it, the SM clock's
    median and least, the hottest GPU and memory temperatures, the seconds each violation counter
    grew, and every call that failed (with the samples it failed in)."""
    reasons = [s["clock_events"] for s in samples if isinstance(s.get("clock_events"), int | list)]
    clocks = [s["sm_clock"] for s in samples if isinstance(s.get("sm_clock"), int)]
    return {
        "samples": len(samples),
        "sampled_s": round(sampled_s, 3),
        "reasons_read": len(reasons),
        "clock_events": _tally(key for value in reasons for key in reason_keys(value)),
        "causes": _tally(cause for s in samples for cause in s.get("causes") or ()),
        "sm_clock_median": int(median(clocks)) if clocks else None,
        "sm_clock_min": min(clocks) if clocks else None,
        "temperature_max": _most(samples, "temperature"),
        "memory_temperature_max": _most(samples, "memory_temperature"),
        "power_max_mw": _most(samples, "power_mw"),
        "violation_s": grown(before, after, sampled_s),
        "unread": _failed_calls(samples, unread or {}),
    }


def _tally(keys: Iterator[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    return counts


def _failed_calls(samples: list[dict[str, Any]], more: dict[str, Any]) -> dict[str, Any]:
    """Each reading that failed in any sample, with the samples it failed in."""
    failed: dict[str, Any] = {key: dict(f) for key, f in more.items()}
    for sample in samples:
        for key, f in (sample.get("unread") or {}).items():
            failed[key] = {**f, "samples": failed.get(key, {}).get("samples", 0) + 1}
    return failed


def reason_keys(value: int | list[str]) -> list[str]:
    """Pure: the reasons one sample asserts: NVML's bitmask as its bits ("0x8"), AMD SMI's list
    of limits as given."""
    if isinstance(value, list):
        return [str(name) for name in value]
    return [f"0x{1 << bit:x}" for bit in range(64) if value >> bit & 1]


def per_gpu_figures(snap: NvmlSnapshot, gpus: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Pure: the figures fleet comparison reads (gpuenv/verify/figures.py), by CUDA index: the
    temperature at the start, and the SM clock under load (absent where no load ran)."""
    by_nvml = {g["index"]: g for g in snap.gpus}
    figures: dict[str, dict[str, int]] = {}
    for metric, key in (("temperature_c", "temperature"), ("sm_clock_mhz", "sm_clock_under_load")):
        values = {str(g["cuda_index"]): by_nvml[g["index"]].get(key) for g in gpus}
        present = {i: int(v) for i, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
        if present:
            figures[metric] = present
    return figures


def median(values: list[int]) -> float:
    """statistics.median of a non-empty list (without importing statistics: its fractions and decimal
    would cost `--passive`, which imports this module, some 2 ms)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _most(samples: list[dict[str, Any]], key: str) -> int | None:
    values = [s[key] for s in samples if isinstance(s.get(key), int)]
    return max(values) if values else None


@contextlib.contextmanager
def gpu_load(hold: float = 0.0) -> Iterator[Load]:
    """Every visible GPU busy in a short-lived process (gpuenv.verify.gpuload) for `hold` seconds
    and some slack (it also stops when the block ends); yields the Load it said it started, or
    why not. GPUs are taken in PCI bus order, as NVML numbers them."""
    limit = hold + LINK_POLL_S + LOAD_SLACK_S
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuenv.verify.gpuload", str(os.getpid()), f"{limit:g}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], LOAD_READY_S)
        line = proc.stdout.readline().strip() if ready else ""
        if line.startswith("ready"):
            named = [word.removeprefix("gpus=") for word in line.split() if word.startswith("gpus=")]
            yield Load(gpus=tuple(filter(None, named[0].split(","))) if named else None)
        else:
            yield Load(line.removeprefix("unavailable ") or f"the load process did not start within {LOAD_READY_S:g} s")
    finally:
        with contextlib.suppress(OSError):
            if proc.stdin:
                proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
