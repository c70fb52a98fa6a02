"""Joules one GPU used while a `with` block ran, read through the node's management library (the
platform's node half: NVML's total-energy counter, AMD SMI's energy accumulator): the counter where
the GPU has one, else the mean of power samples (every SAMPLE_S) times the elapsed time; `source`
says which, or why neither (then `joules` is None). verify's workload checks and tune power's
workload read their GPUs' energy through it."""

from __future__ import annotations

import threading
import time

from gpuenv.platforms import nodes
from gpuenv.platforms.node import GpuNode


class EnergyMeter:
    SAMPLE_S = 0.05

    def __init__(self, index: int, node: GpuNode | None = None) -> None:
        self.index = index  # the management library's index
        self.node = node or nodes.GPU_NODES[0]
        self.joules: float | None = None
        self.seconds: float | None = None  # the time the joules cover: divide by this, not a timer beside it
        self.source = "not measured"
        self._samples: list[int] = []
        self._problem = self.node.management.init()

    def _energy_mj(self) -> float | None:
        return None if self._problem else self.node.management.energy_mj([self.index]).get(self.index)

    def __enter__(self) -> EnergyMeter:
        self._start = self._energy_mj()
        self._t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self._start is None and not self._problem:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.SAMPLE_S):
            value = self.node.management.power_mw([self.index]).get(self.index)
            if value is not None:
                self._samples.append(value)

    def __exit__(self, *exc: object) -> None:
        self.seconds = elapsed = time.perf_counter() - self._t0
        end = self._energy_mj() if self._start is not None else None
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
        library, counter = self.node.library, self.node.energy_counter
        if self._start is not None and end is not None:
            self.joules, self.source = (end - self._start) / 1000, f"{library} {counter}"
        elif self._samples:
            self.joules = sum(self._samples) / len(self._samples) / 1000 * elapsed
            self.source = f"{library} power samples ({len(self._samples)}; the {counter} is unsupported)"
        else:
            why = f" ({self._problem})" if self._problem else ""
            self.source = f"neither {library}'s {counter} nor its power reading is available{why}"
