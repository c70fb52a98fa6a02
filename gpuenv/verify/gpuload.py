"""A short-lived process that keeps every visible GPU busy while NVML reads the PCIe links.

Idle links train down (Gen1 on H100/H200, by design), so the link generation means something only
under load. The load runs in its own process, never in the verify worker: a CUDA context held by
a long-lived process would keep the ranks of later checks off GPUs in EXCLUSIVE_PROCESS mode.

Protocol: prints "ready N gpus=ID,ID..." on stdout once each of the N GPUs has finished one
synchronised matmul (the load is real, not just launched), each GPU named by its PCI address
("pci:0000:18:00") or, where torch does not give it, its UUID ("uuid:..."), so the sampler reads
the GPUs the load runs on, whatever CUDA's numbering; or "unavailable WHY". Then runs until stdin
closes or LIMIT_S passes. Run as `python -m gpuenv.verify.gpuload PARENT_PID [LIMIT_S]`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gpuenv.processes import die_with_parent
from gpuenv.verify import faults
from gpuenv.verify.model import HEALTH

LIMIT_S = 60.0  # unless the caller gives its own (the deep level holds the load a minute and more)
READY_S = 30.0
SIZE = 4096
STANDIN_GPUS_ENV = "GPUENV_TEST_LOAD_GPUS"  # the stand-in load's "gpus=" (tests: a load on other GPUs)


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


def gpu_id(props: Any) -> str:
    """How the load names a GPU to the sampler: its PCI address, else its UUID."""
    if getattr(props, "pci_bus_id", None) is not None:
        return f"pci:{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}"
    return f"uuid:{props.uuid}"


def stand_in(limit: float) -> int:
    """The test seam's load (GPUENV_TEST_FAULT=nvml:standin): no torch, no GPU; the marker file
    exists while it "runs", until stdin closes or `limit` passes. It names the GPUs
    GPUENV_TEST_LOAD_GPUS lists, else none (the sampler then reads every visible GPU)."""
    marker = os.environ.get(faults.LOAD_MARKER_ENV)
    if marker:
        Path(marker).touch()
    try:
        named = os.environ.get(STANDIN_GPUS_ENV)
        print("ready 0 (stand-in load)" + (f" gpus={named}" if named else ""), flush=True)
        watcher = threading.Thread(target=sys.stdin.read, daemon=True)
        watcher.start()
        watcher.join(timeout=limit)
    finally:
        if marker:
            with contextlib.suppress(OSError):
                os.unlink(marker)
    return 0


def main(argv: list[str]) -> int:
    die_with_parent(int(argv[0]))
    limit = float(argv[1]) if len(argv) > 1 else LIMIT_S
    if faults.active(HEALTH) == "standin":
        return stand_in(limit)
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
    gpus = ",".join(gpu_id(torch.cuda.get_device_properties(i)) for i in range(count))
    print(f"ready {count} gpus={gpus}", flush=True)
    watcher = threading.Thread(target=sys.stdin.read, daemon=True)
    watcher.start()
    watcher.join(timeout=limit)
    stop.set()
    deadline = time.monotonic() + 10
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
