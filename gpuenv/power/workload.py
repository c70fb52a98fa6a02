"""The workload process of `gpuenv tune power`: the NLP training step, measured at each cap.

A child of gpuenv in its own process group, so a crash or a hang here never stops gpuenv from
putting the limits back: the parent owns the limits, this process only runs the step. One JSON
request a line on stdin, one JSON answer a line on the original stdout (library prints go to
stderr). It reads its GPU's energy counter (NVML's, or AMD SMI's on an AMD node) around the timed
steps itself, so the joules cover exactly the work timed; where the counter is unsupported it
samples the power draw instead.
It dies with its parent (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

from gpuenv.platforms import nodes
from gpuenv.power.energy import EnergyMeter
from gpuenv.processes import die_with_parent
from gpuenv.verify import faults
from gpuenv.verify.workloads import nlp

PARENT_ENV = "GPUENV_TUNE_PARENT"
FAULT_NAME = "tune-power"  # GPUENV_TEST_FAULT=tune-power:abort|hang[:rankN], for gpuenv's own tests
MEASURED = [0]  # measurements so far: a fault's rankN hits the (N+1)th, so a test can fail mid-run


def hello(device: str) -> dict[str, Any]:
    import torch  # torch: heavy, loaded only in the workload process

    cuda = bool(torch.cuda.is_available())
    answer: dict[str, Any] = {"torch": torch.__version__, "cuda_devices": torch.cuda.device_count() if cuda else 0}
    if device == "cpu":
        return {**answer, "device": "cpu"}
    if not cuda:  # never a quiet fall-back to the CPU: its figures cannot choose a GPU's cap
        return {**answer, "device": None, "why": f"torch {torch.__version__} sees no CUDA device"}
    return {**answer, "device": "cuda"}


def measure(request: dict[str, Any]) -> dict[str, Any]:
    """The NLP step at the cap in force: its own untimed warm-up, then the timed steps, with the
    GPU's joules read around exactly those (verify's models check measures the same way)."""
    faults.inject(FAULT_NAME, rank=MEASURED[0])
    MEASURED[0] += 1
    device = f"cuda:{request['cuda_index']}" if request["device"] == "cuda" else "cpu"
    size = nlp.size_for(device, request["level"])
    index = int(request["nvml_index"])  # the management library's index: NVML's, or AMD SMI's
    meter = EnergyMeter(index, nodes.for_smi(request.get("smi", "")))
    result = nlp.throughput(device, size=size, steps=int(request["steps"]), around=meter)
    return {
        "tokens": int(result.tokens),
        "seconds": float(result.seconds),
        "tokens_per_s": float(result.tokens_per_s),
        "wall_s": meter.seconds or float(result.seconds),  # what the joules cover: watts = joules / wall_s
        "energy_j": meter.joules,
        "energy_source": meter.source,  # the counter, power samples, or why neither
        "precision": result.precision,
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
    die_with_parent(int(os.environ[PARENT_ENV]))
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(answers)


if __name__ == "__main__":
    main()
