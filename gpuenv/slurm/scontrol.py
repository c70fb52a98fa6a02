"""Adapter for Slurm's own commands (scontrol, sinfo), each call under a timeout."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from gpuenv.errors import CannotRun

TIMEOUT = 10.0


@dataclass(frozen=True)
class NodeState:
    state: str  # sinfo's long state, e.g. "idle", "drained", "draining", "mixed*"
    reason: str | None

    @property
    def drained(self) -> bool:
        return "drain" in self.state


def _call(args: list[str], *, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    if shutil.which(args[0]) is None:
        raise CannotRun(f"{args[0]} not found", hint="run this on a Slurm node (Debian: apt-get install slurm-client)")
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise CannotRun(f"{' '.join(args[:3])} did not answer within {timeout:.0f} s", hint="is slurmctld up?") from exc


def _failed(args: list[str], proc: subprocess.CompletedProcess[str]) -> CannotRun:
    detail = (proc.stderr or proc.stdout).strip().splitlines()
    return CannotRun(f"{' '.join(args[:3])} failed: {detail[-1] if detail else f'exit {proc.returncode}'}")


def _run(args: list[str], *, timeout: float = TIMEOUT) -> str:
    proc = _call(args, timeout=timeout)
    if proc.returncode != 0:
        raise _failed(args, proc)
    return proc.stdout


PING_TIMEOUT = 5.0
NO_SLURM = "run the hooks on a Slurm node whose slurmctld is up (scontrol ping); outside Slurm, use gpuenv verify"


def ping(*, timeout: float = PING_TIMEOUT) -> None:
    """CannotRun unless slurmctld answers `scontrol ping` within the timeout."""
    args = ["scontrol", "ping"]
    try:
        proc = _call(args, timeout=timeout)
    except CannotRun as exc:
        raise CannotRun(f"Slurm is not reachable: {exc.message}", hint=NO_SLURM) from exc
    said = (proc.stdout or proc.stderr).strip().splitlines()
    if proc.returncode != 0 or any("DOWN" in line for line in said):
        detail = said[-1] if said else f"exit {proc.returncode}"
        raise CannotRun(f"Slurm is not reachable: scontrol ping: {detail}", hint=NO_SLURM)


def node_name(node: str) -> str | None:
    """The NodeName slurmctld has for `node` (`scontrol show node`), or None when it knows no such node."""
    args = ["scontrol", "-o", "show", "node", node]
    proc = _call(args)
    if proc.returncode != 0:
        if "not found" in (proc.stderr + proc.stdout).lower():
            return None
        raise _failed(args, proc)
    names = re.findall(r"^NodeName=(\S+)", proc.stdout, re.MULTILINE)
    return names[0] if len(names) == 1 else None


def node_state(node: str) -> NodeState | None:
    """The node's state and reason as slurmctld has them, or None when it does not know the node."""
    out = _run(["sinfo", "--noheader", "--Node", "--nodes", node, "--format", "%T|%E"]).strip()
    if not out:
        return None
    state, _, reason = out.splitlines()[0].partition("|")
    reason = reason.strip()
    return NodeState(state.strip(), None if reason in ("", "none") else reason)


@dataclass(frozen=True)
class NodeRow:
    """One node of a partition as sinfo lists it."""

    node: str
    partition: str  # with a trailing `*` for the default partition
    state: NodeState


LIST_TIMEOUT = 60.0  # sinfo over every node of a large cluster


def node_rows(partition: str | None) -> list[NodeRow]:
    """Every node of the partition (of every partition when None), with its state and reason."""
    args = ["sinfo", "--noheader", "--Node", "--format=%N|%P|%T|%E"]
    if partition is not None:
        args.append(f"--partition={partition}")
    rows = []
    for line in _run(args, timeout=LIST_TIMEOUT).splitlines():
        node, part, state, reason = [*line.split("|", 3), "", "", ""][:4]
        reason = reason.strip()
        rows.append(
            NodeRow(node.strip(), part.strip(), NodeState(state.strip(), None if reason in ("", "none") else reason))
        )
    return rows


def drain(node: str, reason: str) -> None:
    _run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])


def resume(node: str) -> None:
    _run(["scontrol", "update", f"nodename={node}", "state=resume"])


def show_job(job_id: str) -> str:
    """`scontrol -o show job ID`: the job's record on one line."""
    return _run(["scontrol", "-o", "show", "job", job_id])
