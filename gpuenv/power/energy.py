"""Joules an AMD GPU used while a `with` block ran, read through AMD SMI: its energy accumulator
where it has one, else the mean of power samples times the elapsed time. The same face as verify's
EnergyMeter (NVML's), which the tune power workload uses on an NVIDIA node."""

from __future__ import annotations

import threading
import time

from gpuenv.adapters import amdsmi


class AmdEnergyMeter:
    SAMPLE_S = 0.05

    def __init__(self, index: int) -> None:
        self.index = index
        self.joules: float | None = None
        self.seconds: float | None = None  # the time the joules cover: divide by this, not a timer beside it
        self.source = "not measured"
        self._samples: list[int] = []
        self._problem = amdsmi.init()

    def __enter__(self) -> AmdEnergyMeter:
        self._start = None if self._problem else amdsmi.energy_mj(self.index)
        self._t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self._start is None and not self._problem:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.SAMPLE_S):
            value = amdsmi.power_mw(self.index)
            if value is not None:
                self._samples.append(value)

    def __exit__(self, *exc: object) -> None:
        self.seconds = elapsed = time.perf_counter() - self._t0
        end = amdsmi.energy_mj(self.index) if self._start is not None else None
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
        if self._start is not None and end is not None:
            self.joules, self.source = (end - self._start) / 1000, "AMD SMI energy accumulator"
        elif self._samples:
            self.joules = sum(self._samples) / len(self._samples) / 1000 * elapsed
            self.source = f"AMD SMI power samples ({len(self._samples)}; the energy accumulator is unsupported)"
        else:
            self.source = f"AMD SMI gives neither energy nor power ({self._problem or 'unsupported'})"
