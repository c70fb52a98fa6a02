"""gpuenv's processes: signals, the processes a run started, and dying with the parent.

One rule for every command: SIGINT or SIGTERM interrupts it, it cleans up, says so, and exits 3.
`install()` (called once by the CLI's main) makes SIGTERM behave like Ctrl-C, so a command killed
by Slurm or systemd runs the same clean-up as one interrupted from a terminal. `Deferred` is for
the stretches that must finish once started (stopping Ansible, writing the report a run promised):
a signal inside it is remembered, not raised, and a second one cannot cut the clean-up short;
`signals_interrupt` turns a signal into `errors.Interrupted` for a verify run. Below them: a process's
descendants and group read from /proc, stopping them, the guard that stops Ansible or srun when gpuenv is
SIGKILLed, and the watch that makes a verify worker, rank or load process die with its owner.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from gpuenv.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def install() -> None:
    """SIGTERM raises KeyboardInterrupt like SIGINT does (main turns it into exit 3)."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


def ignore_from_now() -> None:
    """The command has its exit code: a late SIGINT/SIGTERM must not replace it with death by signal.

    CPython puts the default action back on every signal it handles while the interpreter shuts
    down, but leaves an ignored one ignored; SIGKILL still ends a shutdown that hangs.
    """
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


class Deferred:
    """While active, SIGINT/SIGTERM are noted in `.signal` instead of interrupting the code."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._previous: dict[int, Any] = {}

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        self.signal = self.signal or signal.Signals(signum).name

    def __enter__(self) -> Deferred:
        self._previous = {s: signal.signal(s, self._note) for s in SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        if self.signal is not None:
            return  # interrupted: keep ignoring further signals until the command has reported and exited
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_interrupt(deferred: list[int] | None = None) -> Iterator[None]:
    """Turn SIGTERM/SIGINT into Interrupted for the duration of a run; with `deferred`, only note
    the signal there (the caller stops after the running step, which its own limit bounds)."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        if deferred is None:
            raise interrupted_by(signum)
        deferred.append(signum)

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def interrupted_by(signum: int) -> Interrupted:
    name = signal.Signals(signum).name
    return Interrupted(f"interrupted by {name}", signame=name)


def descendants(pid: int) -> list[int]:
    """Every living descendant of a process, read from /proc (children before grandchildren)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    queue = list(parents.get(pid, []))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue += parents.get(child, [])
    return found


def stop_children(*, grace_s: float = 5.0) -> None:
    """SIGTERM every process this one started (their process groups too), then SIGKILL what is
    left after the grace period: nothing of the run outlives it, however deep it forked."""
    targets = descendants(os.getpid())
    _signal_all(targets, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in targets):
        time.sleep(0.1)
    _signal_all([*targets, *descendants(os.getpid())], signal.SIGKILL)


def _signal_all(pids: list[int], sig: int) -> None:
    own_group = os.getpgrp()
    for p in pids:
        with contextlib.suppress(OSError):
            group = os.getpgid(p)
            if group != own_group:  # the child's own group (pexpect gives Ansible a session of its own)
                os.killpg(group, sig)
        with contextlib.suppress(OSError):
            os.kill(p, sig)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# --- the guard: what stops Ansible when gpuenv itself is SIGKILLed ---------------------------

PARENT_ENV = "GPUENV_GUARD_PARENT"
PR_SET_PDEATHSIG = 1
GUARD_GRACE_S = 3.0


def guard_script(folder: Path, program: str, *, last: tuple[str, ...] = ()) -> Path:
    """A tiny executable running `program ARGS... LAST...` under `guard` (ansible-runner takes
    one binary path without arguments, and then leaves the playbook off the command line)."""
    script = folder / f"gpuenv-guard-{program}"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nfrom gpuenv.processes import guard\n"
        f"sys.exit(guard([{program!r}, *sys.argv[1:], *{list(last)!r}]))\n",
        encoding="utf-8",
    )
    script.chmod(0o700)
    return script


def guard(argv: list[str]) -> int:
    """Run argv as a child and stop its whole process group when gpuenv dies, however it dies.

    The kernel sends this process SIGTERM when its parent (gpuenv) dies, even by SIGKILL
    (PR_SET_PDEATHSIG); then the group (Ansible, its forks, their ssh) gets SIGTERM, and SIGKILL
    after a short grace, so nothing outlives gpuenv by more than a few seconds.
    """
    stop: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    _set_pdeathsig(signal.SIGTERM)
    if str(os.getppid()) != os.environ.get(PARENT_ENV, str(os.getppid())):
        return 254  # gpuenv died before the guard was armed
    child = subprocess.Popen(argv)
    while True:
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if stop:
            _stop_group(child)
            return 254


def _stop_group(child: subprocess.Popen[bytes]) -> None:
    group = os.getpgrp()
    targets = descendants(os.getpid())
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGTERM)  # this process ignores it (handled above)
    deadline = time.monotonic() + GUARD_GRACE_S
    while time.monotonic() < deadline and any(_alive(p) for p in targets):
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=0.1)
    _signal_all([*targets, *descendants(os.getpid())], signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=1)


def _set_pdeathsig(sig: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


# --- a verify run's processes: its group, and dying with the owner ------------------------------


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
            while _exists(owner):
                select.select([], [], [], 0.5)
            fd = None
        if fd is not None:
            select.select([fd], [], [])
        _die(group)

    threading.Thread(target=wait, name="gpuenv-exit-with", daemon=True).start()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
