"""A short-lived process that keeps every visible GPU busy while NVML reads the PCIe links.

Idle links train down (Gen1 on H100/H200, by design), so the link generation means something only
under load. The load runs in its own process, never in the verify worker: a CUDA context held by
a long-lived process would keep the ranks of later checks off GPUs in EXCLUSIVE_PROCESS mode.

Protocol: prints "ready N" on stdout once each of the N GPUs has finished one synchronised matmul
(the load is real, not just launched), or "unavailable WHY"; then runs until stdin closes or
LIMIT_S passes. Run as `python -m gpuenv.verify.gpuload PARENT_PID`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path

from gpuenv.verify import faults
from gpuenv.verify.procs import die_with_parent

LIMIT_S = 60.0
READY_S = 30.0
SIZE = 4096
STANDIN_LIMIT_S = 30.0


def _load(index: int, started: threading.Barrier, stop: threading.Event) -> None:
    import torch  # heavy (~1 s): only the workload needs it

    try:
        dev = torch.device("cuda", index)
        a = torch.randn(SIZE, SIZE, device=dev, dtype=torch.bfloat16)
        a @ a
        torch.cuda.synchronize(dev)
    except Exception:
        started.abort()  # the main thread reports the GPU load as unavailable
        raise
    started.wait()
    while not stop.is_set():
        a @ a
        torch.cuda.synchronize(dev)


def stand_in() -> int:
    """The test seam's load (GPUENV_TEST_FAULT=nvml:standin): no torch, no GPU; the marker file
    exists while it "runs", until stdin closes or STANDIN_LIMIT_S passes."""
    marker = os.environ.get(faults.LOAD_MARKER_ENV)
    if marker:
        Path(marker).touch()
    try:
        print("ready 0 (stand-in load)", flush=True)
        watcher = threading.Thread(target=sys.stdin.read, daemon=True)
        watcher.start()
        watcher.join(timeout=STANDIN_LIMIT_S)
    finally:
        if marker:
            with contextlib.suppress(OSError):
                os.unlink(marker)
    return 0


def main(argv: list[str]) -> int:
    die_with_parent(int(argv[0]))
    if faults.active("nvml") == "standin":
        return stand_in()
    try:
        import torch  # heavy (~1 s): only the workload needs it
    except ImportError as exc:
        print(f"unavailable cannot import torch: {exc}", flush=True)
        return 0
    if not torch.cuda.is_available():
        print("unavailable torch sees no CUDA device", flush=True)
        return 0
    count = torch.cuda.device_count()
    started, stop = threading.Barrier(count + 1), threading.Event()
    threads = [threading.Thread(target=_load, args=(i, started, stop), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    try:
        started.wait(timeout=READY_S)
    except threading.BrokenBarrierError:
        print("unavailable a GPU did not finish its first matmul", flush=True)
        return 0
    print(f"ready {count}", flush=True)
    watcher = threading.Thread(target=sys.stdin.read, daemon=True)
    watcher.start()
    watcher.join(timeout=LIMIT_S)
    stop.set()
    deadline = time.monotonic() + 10
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
