"""Distributed ranks for the collective and DDP workloads, started from the verify worker.

Ranks are forked from a multiprocessing forkserver that has imported torch once, so a rank
starts in a fraction of a second instead of importing torch again. The forkserver and every rank
live in the worker's process group: the engine's watchdog kills them all together. If the worker
itself is killed (its parent gpuenv was SIGKILLed), the forkserver dies with it and every rank
with it too (each has a thread waiting on a pidfd: processes.die_with_parent, processes.exit_with).
Each rank writes its result as JSON into a scratch directory; a rank that dies or raises makes
`launch` raise, and the worker reports the check as a crash.
"""

from __future__ import annotations

import datetime
import inspect
import json
import multiprocessing
import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from importlib import import_module
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

from gpuenv.processes import exit_with
from gpuenv.verify import faults
from gpuenv.verify import spread as board
from gpuenv.verify.spread import Spread

RENDEZVOUS_TIMEOUT = datetime.timedelta(minutes=30)  # the worker's watchdog ends a run that hangs long before
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
    spread: Spread | None = None  # ranks of a run across nodes (None: every rank is here)


def start_forkserver() -> None:
    """Start the forkserver now, so it imports torch while the worker does other work."""
    multiprocessing.set_forkserver_preload(PRELOAD)
    forkserver.ensure_running()


class RankRun:
    """Ranks started and running; `results()` waits for them."""

    def __init__(
        self,
        context: Any,
        outdir: tempfile.TemporaryDirectory[str],
        world: int,
        device: str,
        spread: Spread | None = None,
        server: Any = None,
    ) -> None:
        self.context, self.outdir, self.world, self.device = context, outdir, world, device
        self.spread, self.server = spread, server

    def results(self) -> list[dict[str, Any]]:
        try:
            if self.device == "cuda":  # the worker idles while the ranks work the GPUs: import what
                import_soon()  # later checks need (on the CPU path that would slow the ranks measured)
            if self.spread is not None:
                return self._spread_results(self.spread)
            try:
                while not self.context.join():
                    pass
            except Exception as exc:
                raise RanksCrashed.of(exc, [p.exitcode for p in self.context.processes]) from exc
            return [json.loads((Path(self.outdir.name) / f"rank{r}.json").read_text()) for r in range(self.world)]
        finally:
            self.server = None  # the store closes when its last reference goes (every rank has left)
            self.outdir.cleanup()

    def _spread_results(self, spread: Spread) -> list[dict[str, Any]]:
        """Every rank's result (gathered across nodes by the ranks), or Hung naming who held the run
        up: the wait is bounded by the ranks' own collective timeout and a little more."""
        deadline = time.monotonic() + spread.timeout_s + board.LOOK_S
        try:
            try:
                while not self.context.join(timeout=0.2):
                    if time.monotonic() > deadline:
                        self._hung(spread, None)
            except Exception as exc:
                if isinstance(exc, board.Hung):
                    raise
                self._hung(spread, exc)
            if self.server is not None:
                board.wait_for_exits(self.server, spread)
            data: list[dict[str, Any]] = json.loads((Path(self.outdir.name) / "all.json").read_text())
            return data
        finally:
            self.server = None  # the store closes when its last reference goes

    def _hung(self, spread: Spread, exc: Exception | None) -> None:
        """Read the board; raise Hung naming the ranks that hold the run up, else RanksCrashed. The
        store's host keeps it up until every node's worker has read it too (bounded): the nodes'
        deadlines differ by their start, and a store gone mid-look would name its host instead."""
        who = board.diagnose(spread)
        if self.server is not None:
            board.wait_for_exits(self.server, spread, count="diagnosed")
        for process in self.context.processes:
            if process.is_alive():
                process.kill()
        if who or exc is None:
            names = (
                "; ".join(f"rank {r} on {node} {why}" if r is not None else f"{node}: {why}" for r, node, why in who)
                or f"the ranks did not finish within {spread.timeout_s:g} s"
            )
            raise board.Hung(names, who)
        raise RanksCrashed.of(exc, [p.exitcode for p in self.context.processes]) from exc


class RanksCrashed(Exception):
    """A rank died or raised; names the rank that started it where its exit says so."""

    def __init__(self, message: str, exit_codes: list[int | None], rank: int | None, signal_name: str | None):
        super().__init__(message)
        self.exit_codes, self.rank, self.signal_name = exit_codes, rank, signal_name

    @classmethod
    def of(cls, exc: Exception, exit_codes: list[int | None]) -> RanksCrashed:
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


def start(
    target: str, *, check: str, world: int, device: str, params: dict[str, Any], spread: Spread | None = None
) -> RankRun:
    """Start `target` on `world` ranks (or on this node's share of a spread run); the caller may
    work meanwhile, then call results()."""
    start_processes = import_module("torch.multiprocessing.spawn").start_processes
    start_forkserver()
    server = board.host(spread) if spread is not None else board.local_host(RENDEZVOUS_TIMEOUT)
    outdir = tempfile.TemporaryDirectory(prefix="gpuenv-ranks-")
    port = spread.port if spread is not None else server.port
    job = RankJob(target, check, world, device, port, outdir.name, params, os.getpid(), spread)
    here = len(spread.ranks) if spread is not None else world
    context = start_processes(rank_main, args=(job,), nprocs=here, join=False, start_method="forkserver")
    return RankRun(context, outdir, world, device, spread, server)


def launch(
    target: str, *, check: str, world: int, device: str, params: dict[str, Any], spread: Spread | None = None
) -> list[dict[str, Any]]:
    """Run `target` on `world` ranks and return their results, rank by rank (all ranks', when spread)."""
    return start(target, check=check, world=world, device=device, params=params, spread=spread).results()


def rank_main(local: int, job: RankJob) -> None:
    """One rank: join the process group (through the store this node's worker hosts, or the spread run's),
    run the target, write its result (spread: every rank's, gathered, by the first rank here)."""
    import torch.distributed as dist  # torch: heavy, loaded only where the check runs

    exit_with(job.owner)
    spread = job.spread
    rank = spread.ranks[local] if spread else local
    world = spread.world if spread else job.world
    index = spread.devices[local] if spread else local
    _bind_device(job, index, here=len(spread.ranks) if spread else job.world)
    options = _device_option(job, index)
    global BOARD
    if spread is None:
        store = board.local_client(job.port, RENDEZVOUS_TIMEOUT)
        dist.init_process_group(
            _backend(job), store=store, rank=rank, world_size=world, timeout=RENDEZVOUS_TIMEOUT, **options
        )
    else:
        store = board.client(spread, spread.timeout_s)
        BOARD = board.Board(store, rank, spread.node)
        dist.init_process_group(
            _backend(job),
            store=board.prefixed(store, "pg"),
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=spread.timeout_s),
            **options,
        )
    try:
        params = {**job.params, "device_index": index}
        if spread is not None:
            params["rank_nodes"] = gather(spread.node, world)
        params["fault"] = faults.inject(job.check, rank)
        params["slow"] = faults.slowdown(job.check, rank)
        module, name = job.target.split(":")
        result = getattr(import_module(module), name)(rank, world, job.device, params)
        _write(job, local, rank, result)
    except Exception as exc:
        if BOARD is not None:  # it gave up (a peer's timeout, most often): not the one to blame
            BOARD.fail(exc)
        raise
    finally:
        _finish(dist)


BOARD: Any = None  # this rank's board on the spread run's store (None on a run on one node)


def mark() -> None:
    """Note on the board that this rank reached its next step (a no-op on one node)."""
    if BOARD is not None:
        BOARD.mark()


def _backend(job: RankJob) -> str:
    return "nccl" if job.device == "cuda" else "gloo"


def _bind_device(job: RankJob, index: int, *, here: int) -> None:
    import torch  # torch: heavy, loaded only where the check runs

    if job.device == "cuda":
        torch.cuda.set_device(index)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // here))


def _device_option(job: RankJob, index: int) -> dict[str, Any]:
    """NCCL binds to this device at once: barriers do not guess, subgroups split the communicator."""
    import torch  # torch: heavy, loaded only where the check runs
    import torch.distributed as dist  # torch: heavy, loaded only where the check runs

    if job.device == "cuda" and "device_id" in inspect.signature(dist.init_process_group).parameters:
        return {"device_id": torch.device("cuda", index)}
    return {}


def gather(item: Any, world: int) -> list[Any]:
    """Every rank's `item` (a small JSON-able value), in rank order, on every rank."""
    import torch.distributed as dist  # torch: heavy, loaded only where the check runs

    found: list[Any] = [None] * world
    dist.all_gather_object(found, item)
    return found


def _write(job: RankJob, local: int, rank: int, result: dict[str, Any]) -> None:
    """This rank's result; on a spread run every rank's, gathered (a barrier), by the first here."""
    if job.spread is None:
        (Path(job.outdir) / f"rank{rank}.json").write_text(json.dumps(result))
        return
    BOARD.store.set(f"done/{rank}", "1")
    BOARD.stop()
    every = gather(result, job.spread.world)
    if local == 0:
        (Path(job.outdir) / "all.json").write_text(json.dumps(every))


def _finish(dist: Any) -> None:
    dist.destroy_process_group()
    if BOARD is not None:
        BOARD.leave()
