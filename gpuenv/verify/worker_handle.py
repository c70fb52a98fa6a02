"""The verify worker as the engine holds it: the process (its own process group), the line protocol
with a deadline on every answer, and the kill of the whole group (worker, forkserver, ranks)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import IO, Any

from gpuenv.processes import group_members

# How the worker (gpuenv.verify.worker, its own program) finds its answer pipe and its parent
FD_ENV = "GPUENV_VERIFY_FD"
PARENT_ENV = "GPUENV_VERIFY_PARENT"


class WorkerTimeout(Exception):
    pass


class WorkerDied(Exception):
    pass


class Worker:
    """The worker process and its line protocol, with a deadline on every answer."""

    def __init__(
        self,
        stderr: IO[bytes],
        *,
        env: dict[str, str] | None = None,
        program: str = "gpuenv.verify.worker",
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        """`program`: the module run (the worker, or a site check's helper); `pass_fds`: descriptors
        it inherits."""
        read_end, write_end = os.pipe()
        self.stderr = stderr
        self.proc = subprocess.Popen(
            [sys.executable, "-m", program],
            stdin=subprocess.PIPE,
            stdout=stderr,
            stderr=stderr,
            pass_fds=(write_end, *pass_fds),
            start_new_session=True,
            env={**os.environ, **(env or {}), FD_ENV: str(write_end), PARENT_ENV: str(os.getpid())},
        )
        os.close(write_end)
        self.answers = read_end
        self.buffer = b""

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError as exc:
            raise WorkerDied() from exc
        return self.answer(timeout)

    def answer(self, timeout: float) -> dict[str, Any]:
        """The next answer line, within `timeout` seconds (a request may be answered more than once)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout()
            ready, _, _ = select.select([self.answers], [], [], left)
            if ready:
                chunk = os.read(self.answers, 1 << 16)
                if not chunk:
                    raise WorkerDied()
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer

    def kill(self) -> None:
        """SIGKILL the whole process group, then wait until no member is left (bounded)."""
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        deadline = time.monotonic() + 5
        while group_members(pgid) and time.monotonic() < deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            time.sleep(0.05)
        self.close()

    def stop(self) -> None:
        """Ask the worker to end (stdin closed); kill the group if it lingers."""
        with contextlib.suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.kill()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.answers)
        with contextlib.suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()
