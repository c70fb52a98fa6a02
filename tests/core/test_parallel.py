"""gpuenv.parallel: the bounded worker pool's behaviour when interrupted."""

from __future__ import annotations

from concurrent.futures import process

import pytest

from gpuenv import parallel


def test_an_interruption_before_the_pool_started_its_thread_is_what_the_caller_sees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Interrupted between making its manager thread and starting it, the pool cannot be joined
    (RuntimeError): the caller still gets the interruption, not a crash."""

    def interrupted(self: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(parallel, "cpus", lambda most: 2)
    monkeypatch.setattr(process._ExecutorManagerThread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt), parallel.workers(4, parallel_from=1, most=2) as pool:
        parallel.results(pool, abs, [-1, -2])
