"""Ranks spread over several nodes: the c10d store they meet at, a board of heartbeats and steps on it,
and what the board says when a peer stops answering.

Every rank is a client of one TCPStore (c10d's): hosted by the verify worker of node 0 (explicit
flags) or of rank 0 (srun, torchrun without an agent store), or by torchrun's agent. Each rank
writes its node's name, a heartbeat counter (a thread, every `BEAT_S`) and the step it has reached.
A rank that froze (SIGSTOP, a dead node) stops beating; a rank stuck in its own code beats but
falls behind the others' step. The worker reads the board when its ranks overrun their deadline,
so a hang is reported as a timeout naming the rank and its node, never as an endless wait.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

BEAT_S = 0.5
LOOK_S = 2.0  # how long the board is watched for heartbeats when a peer seems hung
STORE_TIMEOUT_S = 5.0  # any one store operation of the worker's (a frozen store host must not hang it)
EXIT_WAIT_S = 5.0  # the store's host waits this long for every rank to leave (or be diagnosed) before closing it


@dataclass(frozen=True)
class Spread:
    """What the ranks this worker starts need to join a run across nodes."""

    ranks: tuple[int, ...]  # the global rank of each process started here
    devices: tuple[int, ...]  # and the CUDA index it binds to
    world: int
    addr: str
    port: int
    prefix: str  # store keys of this run (job id and check)
    timeout_s: float  # rendezvous and every collective
    node: str
    host_store: bool


class Hung(Exception):
    """Ranks stopped answering: `who` names each (rank, node, why)."""

    def __init__(self, message: str, who: list[tuple[int | None, str, str]]) -> None:
        super().__init__(message)
        self.who = who


def _dist() -> Any:
    """torch.distributed, typed as Any (its stubs do not export the store classes)."""
    import torch.distributed  # heavy (~1 s): only the workload needs it

    return torch.distributed


def prefixed(store: Any, prefix: str) -> Any:
    return _dist().PrefixStore(prefix, store)


def client(spread: Spread, timeout_s: float) -> Any:
    dist = _dist()

    store = dist.TCPStore(spread.addr, spread.port, is_master=False, timeout=timedelta(seconds=timeout_s))
    return dist.PrefixStore(spread.prefix, store)


def host(spread: Spread) -> Any:
    """The store server, hosted here for the length of the check (None where another hosts it)."""
    dist = _dist()

    if not spread.host_store:
        return None
    return dist.TCPStore(
        "0.0.0.0",
        spread.port,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=spread.timeout_s),
    )


def local_host(timeout: timedelta) -> Any:
    """The store of one node's ranks, hosted by its verify worker for the check, on the port the kernel
    gives it as it binds: a port probed free and bound later by rank 0 can be taken in between (outgoing
    connections draw from the same range), which would fail a healthy node."""
    return _dist().TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timeout)


def local_client(port: int, timeout: timedelta) -> Any:
    return _dist().TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)


def wait_for_exits(server: Any, spread: Spread, *, count: str = "exited") -> None:
    """Keep the store up until every rank has left (bounded), then the caller drops it; with
    count="diagnosed", until every node's worker has read the board after a hang."""
    dist = _dist()

    store = dist.PrefixStore(spread.prefix, server)
    deadline = time.monotonic() + EXIT_WAIT_S
    while time.monotonic() < deadline and store.add(count, 0) < spread.world:
        time.sleep(0.05)


class Board:
    """A rank's entries on the store: its node, heartbeat, step; `done` when it has finished."""

    def __init__(self, store: Any, rank: int, node: str) -> None:
        self.store, self.rank = store, rank
        self.stopping = threading.Event()
        store.set(f"node/{rank}", node)
        self.step = 0
        self.thread = threading.Thread(target=self._beat, name="gpuenv-heartbeat", daemon=True)
        self.thread.start()

    def _beat(self) -> None:
        while not self.stopping.wait(BEAT_S):
            with contextlib.suppress(Exception):  # the store's host may be gone: the worker judges
                self.store.add(f"beat/{self.rank}", 1)

    def mark(self) -> None:
        self.step += 1
        self.store.set(f"step/{self.rank}", str(self.step))

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=2 * BEAT_S + STORE_TIMEOUT_S)

    def fail(self, exc: BaseException) -> None:
        with contextlib.suppress(Exception):
            self.store.set(f"failed/{self.rank}", f"{type(exc).__name__}: {str(exc).strip()[:200]}")

    def leave(self) -> None:
        with contextlib.suppress(Exception):
            self.store.add("exited", 1)


def read(store: Any, key: str) -> str | None:
    """A key's value, or None when it is not there (without waiting for it)."""
    if not store.check([key]):
        return None
    return bytes(store.get(key)).decode()


def diagnose(spread: Spread) -> list[tuple[int | None, str, str]]:
    """Which ranks hold the run up, read from the board: (rank, node, why); the store's host when
    the store itself does not answer (its node is frozen or gone). This worker's ranks are then
    counted as diagnosed: the store's host waits for every node's (wait_for_exits)."""
    try:
        store = client(spread, STORE_TIMEOUT_S)
        first = _snapshot(store, spread.world)
        time.sleep(LOOK_S)
        second = _snapshot(store, spread.world)
        store.add("diagnosed", len(spread.ranks))
    except Exception as exc:
        why = f"the rendezvous store at {spread.addr}:{spread.port} does not answer ({type(exc).__name__})"
        return [(None, spread.addr, why)]
    return judge(first, second, spread.world)


def _snapshot(store: Any, world: int) -> dict[int, dict[str, str | None]]:
    return {r: {k: read(store, f"{k}/{r}") for k in ("node", "beat", "step", "done", "failed")} for r in range(world)}


def judge(
    first: dict[int, dict[str, str | None]], second: dict[int, dict[str, str | None]], world: int
) -> list[tuple[int | None, str, str]]:
    """Pure: from two looks at the board, the ranks that never joined, froze, or fell behind. A rank
    that finished, or gave up with an error (waiting for a peer, most often), is not blamed."""
    found: list[tuple[int | None, str, str]] = []
    steps = [int(second[r]["step"] or 0) for r in range(world) if second[r]["node"] and not second[r]["done"]]
    ahead = max(steps, default=0)
    for r in range(world):
        now, before = second[r], first[r]
        node = now["node"] or "?"
        if now["done"] or now["failed"]:
            continue
        if now["node"] is None:
            found.append((r, node, "never joined the rendezvous"))
        elif now["beat"] == before["beat"]:
            found.append((r, node, f"stopped answering (no heartbeat for {LOOK_S:g} s; frozen or gone)"))
        elif int(now["step"] or 0) < ahead:
            found.append((r, node, f"is stuck at step {int(now['step'] or 0)} while others reached {ahead}"))
    return found
