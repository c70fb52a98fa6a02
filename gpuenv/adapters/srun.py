"""The one place gpuenv runs a Slurm step of its own: `srun --label ...`, its output taken apart by task.

srun's `--label` prefixes every line a task prints with its task number (`  12: ...`) and cuts a
line longer than its buffer into several labelled lines: `split_label` takes the number and the
bytes apart, and a task's output is its lines joined without the line ends srun added or kept
(gpuenv's tasks print JSON, where a line end is only whitespace). srun's own lines (`srun: error:
gpu07: task 3: Exited with exit code 1`) are unlabelled: they are kept as they come.

Every wait has a limit, and SIGINT/SIGTERM (or the limit) stop the step the way srun forwards a
signal to its tasks: srun gets SIGTERM, then SIGKILL after a grace period; `scancel --name` ends
whatever of the job is left. srun runs under gpuenv.processes's guard, so a gpuenv killed outright
does not leave it behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shutil
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from gpuenv import processes
from gpuenv.errors import CannotRun

STOP_GRACE_S = 10.0  # after SIGTERM: for each task's verify to print its partial report and srun to end
SCANCEL_TIMEOUT_S = 10.0
STDERR_KEPT = 20  # lines of each task's stderr kept (and of srun's own)
TASK_LIMIT = 128 << 20  # bytes of one task's output kept: a report's cap, twice over
_LABEL = re.compile(rb"^ *(\d+): ?")
_HINT = "run it where Slurm's client commands are installed and slurmctld answers (sinfo)"


@dataclass
class StepOutput:
    """What a step printed, by task number, and how it ended."""

    rc: int | None = None
    stdout: dict[int, bytearray] = field(default_factory=dict)
    stderr: dict[int, deque[str]] = field(default_factory=dict)
    srun_said: deque[str] = field(default_factory=lambda: deque(maxlen=4 * STDERR_KEPT))  # unlabelled stderr
    timed_out: bool = False
    interrupted: str | None = None  # the signal that stopped it


def split_label(line: bytes) -> tuple[int | None, bytes]:
    """(task number, the task's bytes) of one line of `srun --label` output; (None, line) when unlabelled."""
    found = _LABEL.match(line)
    if found is None:
        return None, line
    return int(found.group(1)), line[found.end() :]


def run_step(
    srun_args: list[str], *, stdin: bytes | None, env: dict[str, str], timeout_s: float, job_name: str, work: Path
) -> StepOutput:
    """Run `srun SRUN_ARGS` (which must hold --label and --job-name=job_name) until it ends or timeout_s."""
    if shutil.which("srun", path=env.get("PATH")) is None:
        raise CannotRun("srun is not on PATH", hint=_HINT)
    guard = processes.guard_script(work, "srun")
    found = StepOutput()
    with processes.Deferred() as signals:
        try:
            proc = subprocess.Popen(
                [str(guard), *srun_args],
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**env, processes.PARENT_ENV: str(os.getpid())},
                start_new_session=True,  # a terminal's Ctrl-C reaches gpuenv, which stops srun its own way
            )
        except OSError as exc:
            raise CannotRun(f"cannot run srun: {exc}", hint=_HINT) from exc
        if stdin is not None:
            threading.Thread(target=_feed, args=(proc, stdin), daemon=True).start()
        _read(proc, found, deadline=time.monotonic() + timeout_s, signals=signals)
        if found.timed_out or signals.signal is not None:
            found.interrupted = signals.signal
            _stop(proc, job_name, env)
        found.rc = proc.wait()
    return found


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except OSError:  # srun ended before it read its input: what it said explains why
        pass


def _read(proc: subprocess.Popen[bytes], found: StepOutput, *, deadline: float, signals: processes.Deferred) -> None:
    """Take srun's output apart as it comes, until both pipes close, the deadline or a signal."""
    assert proc.stdout is not None and proc.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, True)
    selector.register(proc.stderr, selectors.EVENT_READ, False)
    rest = {True: b"", False: b""}
    while selector.get_map():
        if signals.signal is not None:
            return
        if time.monotonic() >= deadline:
            found.timed_out = True
            return
        for key, _ in selector.select(timeout=0.5):
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                selector.unregister(key.fileobj)
                lines = [rest[key.data]] if rest[key.data] else []
            else:
                *lines, rest[key.data] = (rest[key.data] + chunk).split(b"\n")
            for line in lines:
                _take(found, line, to_stdout=key.data)


def _take(found: StepOutput, line: bytes, *, to_stdout: bool) -> None:
    task, data = split_label(line)
    if task is None:
        found.srun_said.append(line.decode("utf-8", "replace"))
    elif to_stdout:
        kept = found.stdout.setdefault(task, bytearray())
        if len(kept) <= TASK_LIMIT:
            kept += data
    else:
        found.stderr.setdefault(task, deque(maxlen=STDERR_KEPT)).append(data.decode("utf-8", "replace"))


def _stop(proc: subprocess.Popen[bytes], job_name: str, env: dict[str, str]) -> None:
    """SIGTERM to srun (it forwards it to every task), SIGKILL after the grace, then scancel the job."""
    processes.stop_children(grace_s=STOP_GRACE_S)
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):  # the job ends at its own time limit anyway
        subprocess.run(
            ["scancel", f"--name={job_name}", f"--user={os.getuid()}"],
            env=env,
            capture_output=True,
            timeout=SCANCEL_TIMEOUT_S,
            check=False,
        )
    proc.wait()
