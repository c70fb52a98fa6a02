"""One bounded parallel map: work spread over forked worker processes, or done in this process.

What the pool must keep (each was a bug once): workers ignore SIGINT (Ctrl-C reaches the whole
process group; the parent decides) and are terminated when the parent is interrupted, even one
stuck in a call; results are submitted and collected, never through Executor.map, whose
cancellation of pending calls makes a pool broken by stopped workers fail setting their futures
(a traceback from its thread, CPython 3.11); below a threshold, or with one CPU, or off Linux, the
work runs in this process, where starting workers would not pay.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager, suppress
from multiprocessing import active_children, get_context
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def cpus(most: int) -> int:
    """The worker processes to use: the CPUs this process may use, at most `most`; 1 off Linux."""
    return min(len(os.sched_getaffinity(0)), most) if hasattr(os, "sched_getaffinity") else 1


@contextmanager
def workers(
    tasks: int, *, parallel_from: int, most: int, started: Callable[[], None] | None = None
) -> Iterator[Executor]:
    """Where `tasks` pieces of work run: one forked worker process per CPU (at most `most`) from
    `parallel_from` tasks on, else this process. `started` runs in each worker as it starts.
    Interrupted, the workers are stopped, even one stuck in a call."""
    count = cpus(most) if tasks >= parallel_from else 1
    if count < 2:
        yield InProcess()
        return
    others = set(active_children())
    # fork: the workers start at once with gpuenv imported (the process has no threads yet)
    pool = ProcessPoolExecutor(count, mp_context=get_context("fork"), initializer=_worker_started, initargs=(started,))
    try:
        yield pool
    except BaseException:
        for worker in set(active_children()) - others:  # the pool's
            worker.terminate()
        raise
    finally:
        # cancelling nothing: see results(). An interruption inside submit() can land after the pool made its
        # manager thread but before it started it; shutdown() then cannot join it (RuntimeError, CPython 3.11):
        # the workers are stopped above, and the interruption is what the caller must see.
        with suppress(RuntimeError):
            pool.shutdown()


def results(pool: Executor, fn: Callable[[T], R], items: list[T]) -> list[R]:
    """fn of every item, run by the pool, in order. Not Executor.map: interrupted, it cancels the calls
    not yet started, and a process pool broken after that (its workers stopped) fails setting their
    futures, printing a traceback from its thread (CPython 3.11)."""
    futures = [pool.submit(fn, item) for item in items]
    return [future.result() for future in futures]


def _worker_started(started: Callable[[], None] | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # how the parent stops a worker
    if started is not None:
        started()


class InProcess(Executor):
    """An executor that runs each call at once, in this process."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # handed over by the future, as a worker's would be
            future.set_exception(exc)
        return future
