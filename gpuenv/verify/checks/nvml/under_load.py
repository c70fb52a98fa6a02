"""The GPUs read under load: a short-lived process keeps every visible GPU busy while the PCIe
links (which train down at idle) and the SM clocks are read."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator

from gpuenv.adapters import nvml as adapter
from gpuenv.verify.facts import NvmlSnapshot

LOAD_READY_S = 30.0  # the load process imports torch and starts every GPU
LINK_POLL_S = 2.0  # links retrain within milliseconds of load; poll briefly for the maximum


def read_links_under_load(
    snap: NvmlSnapshot, indices: list[int], load: contextlib.AbstractContextManager[str | None] | None
) -> str | None:
    """Re-read the PCIe generation of these GPUs (NVML index) while `load` keeps them busy,
    polling briefly until each reaches its maximum; marks those readings `under_load`.
    Returns why the generation could not be judged, or None."""
    if load is None:
        return "PCIe generation not judged: no GPU load on the CPU path (idle links train down)"
    by_index = {g["index"]: g for g in snap.gpus if g["index"] in indices}
    with load as problem:
        if problem:
            return f"PCIe generation not judged: no GPU load ({problem}); idle links train down"
        deadline = time.monotonic() + LINK_POLL_S
        while True:
            gens = adapter.pcie_generations(list(by_index))
            at_max = all(gen is None or gen >= (by_index[i]["pcie"].get("max_gen") or 0) for i, gen in gens.items())
            if at_max or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        clocks = adapter.sm_clocks(list(by_index))  # busy GPUs run at the clocks their cooling allows
    for i, gen in gens.items():
        by_index[i]["pcie"].update(gen=gen, under_load=gen is not None)
        by_index[i]["sm_clock_under_load"] = clocks.get(i)
    return None


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
