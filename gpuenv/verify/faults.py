"""Test-only fault injection, inert unless GPUENV_TEST_FAULT is set.

GPUENV_TEST_FAULT is a comma-separated list of CHECK:KIND[:rankN]. KIND is
  corrupt  the rank's result of a collective gets one wrong element (allreduce only)
  slow     (allreduce, :rankN) every collective the rank takes part in is SLOW_S longer, as behind a
           slow node: the rank enters it that much late, and its peers wait for it
  slowlink (allreduce, :rankA-rankB) every collective both ranks take part in is SLOW_S longer, as
           across a slow link between their nodes
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
from typing import Any

from gpuenv.errors import BadRequest

ENV = "GPUENV_TEST_FAULT"
KINDS = ("corrupt", "hang", "abort", "stop", "kill", "standin", "slow", "slowlink")
# Many times a healthy group's collective on the localisation's message (4 MiB on the CPU: some
# 10-40 ms on the shared 2-core test machine), so that a slow group stands out of the scheduler's noise.
SLOW_S = 0.3
LOAD_MARKER_ENV = "GPUENV_TEST_LOAD_MARKER"


@dataclass(frozen=True)
class Fault:
    check: str
    kind: str
    rank: int | None
    peer: int | None = None  # slowlink: the other end (rank is the lower)


def parse(value: str) -> list[Fault]:
    faults = []
    for part in filter(None, (p.strip() for p in value.split(","))):
        fields = part.split(":")
        if len(fields) not in (2, 3) or fields[1] not in KINDS:
            raise ValueError(f"bad {ENV} entry {part!r}: want CHECK:{'|'.join(KINDS)}[:rankN]")
        if fields[1] == "slowlink":
            faults.append(_link(part, fields))
            continue
        rank = None
        if len(fields) == 3:
            rank = _rank(part, fields[2])
        elif fields[1] == "slow":
            raise ValueError(f"bad {ENV} entry {part!r}: slow names its rank, CHECK:slow:rankN")
        faults.append(Fault(fields[0], fields[1], rank))
    return faults


def _rank(part: str, field: str) -> int:
    if not field.startswith("rank") or not field[4:].isdigit():
        raise ValueError(f"bad {ENV} entry {part!r}: the third field is rankN")
    return int(field[4:])


def _link(part: str, fields: list[str]) -> Fault:
    ends = fields[2].split("-") if len(fields) == 3 else []
    if len(ends) != 2:
        raise ValueError(f"bad {ENV} entry {part!r}: slowlink names two ranks, CHECK:slowlink:rankA-rankB")
    a, b = sorted(_rank(part, end) for end in ends)
    if a == b:
        raise ValueError(f"bad {ENV} entry {part!r}: a link joins two different ranks")
    return Fault(fields[0], "slowlink", a, b)


def active(check: str, *, rank: int | None = None, env: dict[str, str] | None = None) -> str | None:
    """The fault kind injected into this check (and rank), or None: always None unless set."""
    value = (os.environ if env is None else env).get(ENV, "")
    if not value:
        return None
    for fault in parse(value):
        if fault.check == check and (fault.rank is None or fault.rank == rank):
            return fault.kind
    return None


def slowdown(check: str, rank: int, *, env: dict[str, str] | None = None) -> dict[str, Any] | None:
    """What a slow node or link adds to this rank's collectives: {"seconds", "peer"} (peer None: every
    collective it joins; else only those the peer joins too), or None. Inert unless GPUENV_TEST_FAULT is set."""
    value = (os.environ if env is None else env).get(ENV, "")
    for fault in parse(value) if value else ():
        if fault.check == check and fault.kind in ("slow", "slowlink") and fault.rank == rank:
            return {"seconds": SLOW_S, "peer": fault.peer}
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
