"""The workload process of `gpuenv tune power`: the NLP training step, measured at each cap.

A child of gpuenv in its own process group, so a crash or a hang here never stops gpuenv from
putting the limits back: the parent owns the limits, this process only runs the step. One JSON
request a line on stdin, one JSON answer a line on the original stdout (library prints go to
stderr). It reads its GPU's energy counter around the measured call itself, so the joules cover
exactly the work timed; where the counter is unsupported it samples the power draw instead.
It dies with its parent (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
import traceback
from typing import Any

from gpuenv.verify import faults

PARENT_ENV = "GPUENV_TUNE_PARENT"
FAULT_NAME = "tune-power"  # GPUENV_TEST_FAULT=tune-power:abort|hang, for gpuenv's own tests
SAMPLE_S = 0.05
WARMUP_STEPS = 3  # each new cap: let clocks settle under the new limit before timing


def hello(device: str) -> dict[str, Any]:
    import torch

    cuda = bool(torch.cuda.is_available())
    answer: dict[str, Any] = {"torch": torch.__version__, "cuda_devices": torch.cuda.device_count() if cuda else 0}
    if device == "cpu":
        return {**answer, "device": "cpu"}
    if not cuda:  # never a quiet fall-back to the CPU: its figures cannot choose a GPU's cap
        return {**answer, "device": None, "why": f"torch {torch.__version__} sees no CUDA device"}
    return {**answer, "device": "cuda"}


class Meter:
    """Joules over a stretch of work on one GPU: the energy counter, else the mean of power samples."""

    def __init__(self, nvml_index: int) -> None:
        from gpuenv.adapters import nvml as adapter

        self.adapter, self.index = adapter, nvml_index
        self.ready = adapter.init() is None
        self.before = adapter.energy_mj([nvml_index]).get(nvml_index) if self.ready else None
        self.samples: list[int] = []
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        if self.ready and self.before is None:
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()

    def _sample(self) -> None:
        while not self.stop_event.wait(SAMPLE_S):
            value = self.adapter.power_usage_mw(self.index)
            if value is not None:
                self.samples.append(value)

    def joules(self, wall_s: float) -> tuple[float | None, str | None]:
        if not self.ready:
            return None, None
        if self.before is not None:
            after = self.adapter.energy_mj([self.index]).get(self.index)
            return (None, None) if after is None else ((after - self.before) / 1000, "energy counter")
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=1)
        if not self.samples:
            return None, None
        return statistics.mean(self.samples) / 1000 * wall_s, f"power samples ({len(self.samples)})"


def measure(request: dict[str, Any]) -> dict[str, Any]:
    import torch

    from gpuenv.verify.workloads import nlp

    faults.inject(FAULT_NAME)
    on_gpu = request["device"] == "cuda"
    device = torch.device(f"cuda:{request['cuda_index']}" if on_gpu else "cpu")
    size = nlp.size_for(device, request["level"])
    nlp.throughput(device, size=size, steps=WARMUP_STEPS)
    meter = Meter(int(request["nvml_index"]))
    started = time.perf_counter()
    result = nlp.throughput(device, size=size, steps=int(request["steps"]))
    wall = time.perf_counter() - started
    energy, source = meter.joules(wall)
    return {
        "tokens": int(result.tokens),
        "seconds": float(result.seconds),
        "tokens_per_s": float(result.tokens_per_s),
        "wall_s": wall,
        "energy_j": energy,
        "energy_source": source,
    }


def serve(answers: Any) -> None:
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["op"] == "hello":
                answer = hello(request["device"])
            elif request["op"] == "measure":
                answer = measure(request)
            else:
                answer = {"error": f"unknown request {request['op']}"}
        except Exception as exc:  # the step itself failed: the parent reports it and restores
            answer = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def main() -> None:
    from gpuenv.verify.procs import die_with_parent

    die_with_parent(int(os.environ[PARENT_ENV]))
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(answers)


if __name__ == "__main__":
    main()
