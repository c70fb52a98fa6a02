"""Item 12: a verify child dies with its parent *process*, never with the parent thread that started it.

PR_SET_PDEATHSIG fires when the thread that forked the child ends: a worker, forkserver or load
process started from a short-lived thread was SIGKILLed with gpuenv alive, and the run lost its report.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import os, sys, time
    from gpuenv.processes import die_with_parent
    die_with_parent(int(sys.argv[1]))
    print("armed", flush=True)
    time.sleep(60)
    """
)

PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, threading, time
    started = []
    def spawn():
        argv = [sys.executable, "-c", sys.argv[1], str(os.getpid())]
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        child.stdout.readline()  # armed
        started.append(child)
    thread = threading.Thread(target=spawn)
    thread.start()
    thread.join()  # the thread that forked the child is gone; this process lives on
    time.sleep(1.0)
    print(started[0].pid, started[0].poll(), flush=True)
    sys.stdin.read()  # until the test lets go
    """
)


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_a_child_started_from_a_short_lived_thread_outlives_the_thread_and_dies_with_the_process() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    try:
        assert parent.stdout is not None
        pid_text, status = parent.stdout.readline().split()
        assert status == "None", f"the child died (status {status}) when the thread that started it ended"
        child = int(pid_text)
        parent.send_signal(signal.SIGKILL)  # gpuenv killed outright: its child must not linger
        parent.wait(timeout=10)
        assert _gone(child, within=10), "the child outlived its parent process"
    finally:
        parent.kill()
        parent.wait()
