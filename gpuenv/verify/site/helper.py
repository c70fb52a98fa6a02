"""The process a site check's program runs in: started by the engine in a process group of its own
(gpuenv.verify.worker_handle.Worker), it runs the program in that group and answers, over the same
line protocol as the verify worker, first that the program started, then how it ended.

The program is executed from the descriptor the engine checked it on (/proc/self/fd/N), with the
environment the engine gives it, standard input from /dev/null, its standard output kept (the
first OUT_LIMIT bytes) and its standard error copied to the run's stderr (up to ERR_LIMIT bytes).
The engine's watchdog kills the whole group (this helper, the program and whatever it started) at
the check's limit, and after the check in any case; should gpuenv itself die, this helper kills
the group (processes.die_with_parent).
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from typing import IO, Any

from gpuenv.processes import die_with_parent
from gpuenv.verify.worker_handle import FD_ENV, PARENT_ENV

OUT_LIMIT = 1 << 20  # a check's answer is a line or a small JSON object
ERR_LIMIT = 1 << 20
LINGER_S = 0.5  # how long output is still read after the program exited (a child may hold the pipes)


def execute(request: dict[str, Any], answers: IO[str]) -> None:
    fd = int(request["fd"])
    try:
        proc = subprocess.Popen(
            [request["argv0"]],
            executable=f"/proc/self/fd/{fd}",
            pass_fds=(fd,),
            env=request["env"],
            cwd=request["cwd"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:  # not a program the kernel can run (no #! line, a foreign binary)
        _answer(answers, {"error": f"could not be started: {exc.strerror or exc}"})
        return
    _answer(answers, {"started": proc.pid})
    out = _collect(proc)
    _answer(answers, {"returncode": proc.wait(), "stdout": out.decode("utf-8", errors="replace")})


def _collect(proc: subprocess.Popen[bytes]) -> bytes:
    """The program's standard output (capped), its standard error copied to ours, until both end,
    or LINGER_S after the program exited."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err_left = bytearray(), ERR_LIMIT
    chooser = selectors.DefaultSelector()
    chooser.register(proc.stdout, selectors.EVENT_READ)
    chooser.register(proc.stderr, selectors.EVENT_READ)
    ended: float | None = None
    while chooser.get_map() and (ended is None or time.monotonic() - ended < LINGER_S):
        for key, _ in chooser.select(timeout=0.1):
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                chooser.unregister(key.fileobj)
            elif key.fileobj is proc.stdout:
                out += chunk[: max(0, OUT_LIMIT - len(out))]
            elif err_left > 0:
                os.write(2, chunk[:err_left])
                err_left -= len(chunk)
        if ended is None and proc.poll() is not None:
            ended = time.monotonic()
    chooser.close()
    return bytes(out)


def _answer(answers: IO[str], data: dict[str, Any]) -> None:
    answers.write(json.dumps(data) + "\n")
    answers.flush()


def main() -> None:
    die_with_parent(int(os.environ[PARENT_ENV]), group=True)
    answers = os.fdopen(int(os.environ[FD_ENV]), "w")
    for line in sys.stdin:
        execute(json.loads(line), answers)


if __name__ == "__main__":
    main()
