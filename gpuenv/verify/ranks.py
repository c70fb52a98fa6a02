"""Distributed ranks for the collective and DDP workloads, started from the verify worker.

Ranks are forked from a multiprocessing forkserver that has imported torch once, so a rank
starts in a fraction of a second instead of importing torch again. The forkserver and every rank
live in the worker's process group: the engine's watchdog kills them all together. If the worker
itself is killed (its parent gpuenv was SIGKILLed), the forkserver dies with it (PR_SET_PDEATHSIG)
and every rank with it too (a thread waiting on the worker's pidfd).
Each rank writes its result as JSON into a scratch directory; a rank that dies or raises makes
`launch` raise, and the worker reports the check as a crash.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

# The guard first (the forkserver dies with the worker); torch._dynamo: DDP, the profiler and
# checkpointing import it on first use (over a second).
PRELOAD = ["gpuenv.verify.forkserver_guard", "torch", "torch.distributed", "torch._dynamo", "gpuenv.verify.ranks"]


@dataclass(frozen=True)
class RankJob:
    """What every rank runs: `module:function(rank, world, device, params) -> dict`."""

    target: str
    check: str
    world: int
    device: str  # "cuda" | "cpu"
    port: int
    outdir: str
    params: dict[str, Any] = field(default_factory=dict)
    owner: int = 0  # the worker: every rank dies with it


def start_forkserver() -> None:
    """Start the forkserver now, so it imports torch while the worker does other work."""
    import multiprocessing
    from multiprocessing import forkserver

    multiprocessing.set_forkserver_preload(PRELOAD)
    forkserver.ensure_running()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RankRun:
    """Ranks started and running; `results()` waits for them."""

    def __init__(self, context: Any, outdir: tempfile.TemporaryDirectory[str], world: int, device: str) -> None:
        self.context, self.outdir, self.world, self.device = context, outdir, world, device

    def results(self) -> list[dict[str, Any]]:
        try:
            if self.device == "cuda":  # the worker idles while the ranks work the GPUs: import what
                import_soon()  # later checks need (on the CPU path that would slow the ranks measured)
            try:
                while not self.context.join():
                    pass
            except Exception as exc:
                raise RanksCrashed.of(exc, [p.exitcode for p in self.context.processes]) from exc
            return [json.loads((Path(self.outdir.name) / f"rank{r}.json").read_text()) for r in range(self.world)]
        finally:
            self.outdir.cleanup()


class RanksCrashed(Exception):
    """A rank died or raised; names the rank that started it where its exit says so."""

    def __init__(self, message: str, exit_codes: list[int | None], rank: int | None, signal_name: str | None):
        super().__init__(message)
        self.exit_codes, self.rank, self.signal_name = exit_codes, rank, signal_name

    @classmethod
    def of(cls, exc: Exception, exit_codes: list[int | None]) -> RanksCrashed:
        import signal

        # torch stops the surviving ranks with SIGTERM: another signal is the cause.
        killed = [(r, c) for r, c in enumerate(exit_codes) if c is not None and c < 0 and c != -signal.SIGTERM]
        if killed:
            rank, code = killed[0]
            name = signal.Signals(-code).name
            return cls(f"rank {rank} died with {name}", exit_codes, rank, name)
        first = str(exc).strip().splitlines()
        return cls(f"a rank failed: {first[-1] if first else type(exc).__name__}", exit_codes, None, None)


def import_soon() -> None:
    """Modules the profiler, DDP and checkpointing import on first use (over a second)."""
    import_module("torch._dynamo")


def start(target: str, *, check: str, world: int, device: str, params: dict[str, Any]) -> RankRun:
    """Start `target` on `world` ranks; the caller may work meanwhile, then call results()."""
    start_processes = import_module("torch.multiprocessing.spawn").start_processes
    start_forkserver()
    outdir = tempfile.TemporaryDirectory(prefix="gpuenv-ranks-")
    job = RankJob(target, check, world, device, free_port(), outdir.name, params, os.getpid())
    context = start_processes(rank_main, args=(job,), nprocs=world, join=False, start_method="forkserver")
    return RankRun(context, outdir, world, device)


def launch(target: str, *, check: str, world: int, device: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Run `target` on `world` ranks and return their results, rank by rank."""
    return start(target, check=check, world=world, device=device, params=params).results()


def rank_main(rank: int, job: RankJob) -> None:
    import datetime
    import inspect

    import torch
    import torch.distributed as dist

    from gpuenv.verify import faults
    from gpuenv.verify.procs import exit_with

    exit_with(job.owner)
    backend = "nccl" if job.device == "cuda" else "gloo"
    device_id: dict[str, Any] = {}
    if job.device == "cuda":
        torch.cuda.set_device(rank)
    if job.device == "cuda" and "device_id" in inspect.signature(dist.init_process_group).parameters:
        # NCCL binds to this device at once: barriers do not guess, subgroups split the communicator
        device_id["device_id"] = torch.device("cuda", rank)
    if job.device == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // job.world))
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{job.port}",
        rank=rank,
        world_size=job.world,
        timeout=datetime.timedelta(minutes=30),
        **device_id,
    )
    try:
        fault = faults.inject(job.check, rank)
        module, name = job.target.split(":")
        params = {**job.params, "fault": fault}
        result = getattr(import_module(module), name)(rank, job.world, job.device, params)
        (Path(job.outdir) / f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()
