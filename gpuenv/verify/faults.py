"""Test-only fault injection, inert unless GPUENV_TEST_FAULT is set.

GPUENV_TEST_FAULT is a comma-separated list of CHECK:KIND[:rankN]. KIND is
  corrupt  the rank's result of a collective gets one wrong element (allreduce only)
  hang     the rank (or the check's process) sleeps forever
  abort    the rank (or the check's process) calls os.abort()
  stop     the rank (or the check's process) stops itself with SIGSTOP: a frozen peer
  kill     the rank (or the check's process) sends itself SIGKILL, as the kernel's OOM killer or a
           job's limit would: nothing of it can catch or report it
  standin  (nvml only) the load the nvml check reads the GPUs under becomes a short sleep without
           torch: it touches the file GPUENV_TEST_LOAD_MARKER names while it "runs" (a fake NVML
           answers its under-load values meanwhile), so the under-load path runs on a CPU machine
Without :rankN a fault hits the check's process itself (or every rank for corrupt).
`gpuenv tune power` answers to the CHECK name tune-power, where rankN is its (N+1)th measurement;
`gpuenv fleet report` to fleet-read (hang: every process reading reports sleeps forever).
The test suite uses it to prove that verify fails, times out and crashes as it must.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from gpuenv.errors import BadRequest

ENV = "GPUENV_TEST_FAULT"
KINDS = ("corrupt", "hang", "abort", "stop", "kill", "standin")
LOAD_MARKER_ENV = "GPUENV_TEST_LOAD_MARKER"


@dataclass(frozen=True)
class Fault:
    check: str
    kind: str
    rank: int | None


def parse(value: str) -> list[Fault]:
    faults = []
    for part in filter(None, (p.strip() for p in value.split(","))):
        fields = part.split(":")
        if len(fields) not in (2, 3) or fields[1] not in KINDS:
            raise ValueError(f"bad {ENV} entry {part!r}: want CHECK:{'|'.join(KINDS)}[:rankN]")
        rank = None
        if len(fields) == 3:
            if not fields[2].startswith("rank") or not fields[2][4:].isdigit():
                raise ValueError(f"bad {ENV} entry {part!r}: the third field is rankN")
            rank = int(fields[2][4:])
        faults.append(Fault(fields[0], fields[1], rank))
    return faults


def active(check: str, *, rank: int | None = None, env: dict[str, str] | None = None) -> str | None:
    """The fault kind injected into this check (and rank), or None: always None unless set."""
    value = (os.environ if env is None else env).get(ENV, "")
    if not value:
        return None
    for fault in parse(value):
        if fault.check == check and (fault.rank is None or fault.rank == rank):
            return fault.kind
    return None


def inject(check: str, rank: int | None = None) -> str | None:
    """The one seam: carry out a hang or abort meant for this check (and rank) here; return the
    fault kind (corrupt is the workload's to apply), or None. Inert unless GPUENV_TEST_FAULT is set."""
    kind = active(check, rank=rank)
    _trigger(kind)
    return kind


def check_setting(env: dict[str, str] | None = None) -> None:
    """BadRequest when GPUENV_TEST_FAULT is set but cannot be parsed (unset or well formed: nothing)."""
    try:
        parse((os.environ if env is None else env).get(ENV, ""))
    except ValueError as exc:
        raise BadRequest(str(exc), hint=f"unset {ENV}: it is for gpuenv's own tests") from None


def _trigger(kind: str | None) -> None:
    if kind == "hang":
        while True:
            time.sleep(3600)
    if kind == "abort":
        os.abort()
    if kind == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
