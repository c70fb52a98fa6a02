"""Processes of a verify run: who belongs to it (read from /proc) and dying with the parent."""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import threading
from pathlib import Path

PR_SET_PDEATHSIG = 1


def group_members(pgid: int) -> list[int]:
    """PIDs of live (not zombie) processes in a process group, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def own_pids() -> set[int]:
    """This process, its parent (gpuenv) and every process of its group (worker, forkserver,
    ranks, the load process): compute processes of the run itself, never leftovers."""
    return {os.getpid(), os.getppid(), *group_members(os.getpgrp())}


def die_with_parent(parent: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux PR_SET_PDEATHSIG);
    if the parent is already gone, die now. Without it a SIGKILLed gpuenv (a Slurm prolog past
    its limit) would leave its workers running under PID 1."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def exit_with(owner: int) -> None:
    """SIGKILL this process when process `owner` ends, though it is not our parent: a rank's
    parent is the forkserver, which lives as long as any rank holds its "alive" pipe, so only
    watching the worker itself breaks that circle. A daemon thread waits on a pidfd."""

    def wait() -> None:
        try:
            fd = os.pidfd_open(owner)
        except ProcessLookupError:
            fd = None
        except OSError:  # no pidfd (old kernel): poll
            while _alive(owner):
                select.select([], [], [], 0.5)
            fd = None
        if fd is not None:
            select.select([fd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=wait, name="gpuenv-exit-with-worker", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
