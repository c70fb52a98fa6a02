"""Processes of a verify run: who belongs to it (read from /proc) and dying with the parent."""

from __future__ import annotations

import os
import select
import signal
import threading
from pathlib import Path
from typing import Any


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


def own_pids_among(gpus: list[dict[str, Any]]) -> frozenset[int]:
    """The run's own processes, read from /proc only where a GPU lists compute processes: they serve
    only to tell the run's own from leftovers, and reading every process's stat is the slowest part
    of a passive read on a node running many processes."""
    if not any(g.get("processes") for g in gpus):
        return frozenset()
    return frozenset(own_pids())


def die_with_parent(parent: int, *, group: bool = False) -> None:
    """SIGKILL this process (with `group`, its whole process group, which it leads) when its parent
    process ends; if the parent is already gone, die now. Without it a SIGKILLed gpuenv (a Slurm
    prolog past its limit) would leave its workers running under PID 1.

    Not PR_SET_PDEATHSIG: the kernel sends that signal when the parent *thread* that forked the child
    ends, not the parent process, so a child started from a short-lived thread (a pool's, an import's)
    was killed with its parent alive and well, and the run lost its report. The parent process is
    watched instead, as exit_with watches the worker."""
    exit_with(parent, group=group)
    if os.getppid() != parent:
        _die(group)


def _die(group: bool) -> None:
    if group:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def exit_with(owner: int, *, group: bool = False) -> None:
    """SIGKILL this process when process `owner` ends, though it need not be our parent (a rank's
    parent is the forkserver, which lives as long as any rank holds its "alive" pipe, so only
    watching the worker itself breaks that circle). A daemon thread waits on a pidfd, which becomes
    readable when the whole process has exited (all its threads), never when one thread ends."""

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
        _die(group)

    threading.Thread(target=wait, name="gpuenv-exit-with", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
