"""fleet verify's application service over Slurm: one srun step, one task per node, Slurm fanning out.

sinfo first: a node srun cannot start a task on now (down, drained, not responding, busy with
other jobs) would make the whole srun wait (ReqNodeNotAvail), so it is `unreachable` with Slurm's
state and reason and left out. Then one `srun --label` with the others in a host file
(`--distribution=arbitrary`: task i runs on the file's line i), each task running
gpuenv/fleet/onhost.py's command with the input files on srun's standard input (which srun gives
every task); `--immediate` and the job's `--time` bound every wait, `--no-kill` and
`--kill-on-bad-exit=0` keep one node's failure from stopping the others. Each task's report comes
back in srun's labelled output; srun's own lines say how each task ended.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from gpuenv import validate
from gpuenv.adapters.srun import StepOutput, run_step
from gpuenv.errors import BadRequest, Interrupted
from gpuenv.extras import needed
from gpuenv.fleet.collect import SLURM_HINTS, Collector, FleetVerifyResult, HostOutcome
from gpuenv.fleet.onhost import KILL_AFTER_S, Answer, host_command
from gpuenv.fleet.request import (
    FleetVerifyRequest,
    check_history,
    check_multi_node,
    inputs_document,
    reports_folder,
    retried_hosts,
    verify_arguments,
)
from gpuenv.output.jsontext import json_text
from gpuenv.slurm.scontrol import NodeRow, node_rows

IMMEDIATE_S = 60  # how long srun may wait for its nodes (a node still completing a job's epilog)
STEP_SLACK_S = 60  # the job's time limit over each task's own
NOT_STARTED = ("idle", "mixed", "completing", "planned")  # base states srun can start a task in now
STATE_FLAGS = "*~#!%$@^"  # not responding, powered off, powering up/down, maintenance, rebooting
MAX_NODES = 100_000
_HINT = "a Slurm host list, e.g. gpu[001-128],gpu200 (sinfo -N lists the nodes)"
_STATUS = re.compile(r"^srun: error: (?P<node>[^:\s]+): tasks? (?P<tasks>[0-9,-]+): (?P<word>.+)$")
_LOST = re.compile(r"(?:failed on node|Node failure on) (?P<node>[^:\s]+)")
_EXITED = re.compile(r"Exited with exit code (\d+)")


@dataclass(frozen=True)
class SlurmPlan:
    """A validated request: the nodes asked for, which srun can start a task on, where reports go."""

    request: FleetVerifyRequest
    nodes: tuple[str, ...]  # as asked, in order
    unavailable: dict[str, str]  # node -> why srun cannot start a task there now (Slurm's words)
    inputs: str | None
    reports_dir: Path
    history: Path | None

    @property
    def targets(self) -> tuple[str, ...]:
        return self.nodes

    @property
    def usable(self) -> tuple[str, ...]:
        return tuple(n for n in self.nodes if n not in self.unavailable)


# --- pure: the node list, the states, srun's arguments, what its output says -----------------


def expand_nodelist(text: str) -> tuple[str, ...]:
    """A Slurm host list as node names, in order, each checked (python-hostlist: never a shell)."""
    with needed("hostlist", "reading --nodelist"):
        import hostlist  # extra slurm: only a node list needs it
    try:
        names: list[str] = hostlist.expand_hostlist(text)
    except hostlist.BadHostlist as exc:
        raise BadRequest(f"--nodelist {text[:60]!r} is not a Slurm host list: {exc}", hint=_HINT) from None
    if not names or len(names) > MAX_NODES:
        raise BadRequest(f"--nodelist names {len(names)} nodes", hint=f"from 1 to {MAX_NODES}")
    return tuple(dict.fromkeys(validate.slurm_node(n, "--nodelist node") for n in names))


def why_unavailable(state: str, reason: str | None) -> str | None:
    """Why srun cannot start a task on a node in this sinfo state now, in Slurm's words; None if it can."""
    flags = {c for c in state if c in STATE_FLAGS}
    base = state.rstrip(STATE_FLAGS + "-")
    if base in NOT_STARTED and not flags:
        return None
    said = f"Slurm has it {state}" + (" (not responding)" if "*" in flags else "")
    if base == "allocated":
        said += ", busy with other jobs"
    return f"{said}: {reason}" if reason else said


def pick_nodes(rows: list[NodeRow], asked: tuple[str, ...] | None, partition: str | None) -> tuple[str, ...]:
    """The nodes asked for (all of the partition's when None), each one Slurm lists in the partition srun uses."""
    listed = [r.node for r in rows if partition is not None or r.partition.endswith("*")]
    where = f"partition {partition}" if partition else "the default partition"
    if not listed:
        raise BadRequest(f"sinfo lists no node in {where}", hint="name a partition sinfo lists (--partition)")
    if asked is None:
        return tuple(dict.fromkeys(listed))
    known = set(listed)
    if strangers := [n for n in asked if n not in known]:
        raise BadRequest(f"--nodelist: {', '.join(strangers[:3])} not in {where}", hint="sinfo -N lists its nodes")
    return asked


def srun_arguments(request: FleetVerifyRequest, *, tasks: int, job_name: str, inputs: bool) -> list[str]:
    """srun's options and each task's command (the nodes come in SLURM_HOSTFILE, one line per task)."""
    minutes = math.ceil((request.host_timeout_s + KILL_AFTER_S + STEP_SLACK_S) / 60)
    args = [
        "--label", f"--job-name={job_name}", "--distribution=arbitrary", f"--ntasks={tasks}",
        f"--immediate={IMMEDIATE_S}", "--no-kill", "--kill-on-bad-exit=0", f"--time={minutes}",
    ]  # fmt: skip
    if request.partition is not None:
        args.append(f"--partition={request.partition}")
    command = host_command(
        verify_arguments(request), venv=request.venv, host_timeout_s=request.host_timeout_s, inputs=inputs
    )
    return [*args, *command]


def ranks_per_node(request: FleetVerifyRequest) -> int:
    """Tasks per node: one, or with --multi-node one rank per GPU (--expect-gpus), as srun runs verify's ranks."""
    return request.expect_gpus or 1 if request.multi_node else 1


def answers_of(step: StepOutput, layout: list[str]) -> dict[str, Answer]:
    """Each node's answer from the step's output; `layout` names the node of each task."""
    ended: dict[int, str] = {}  # task -> srun's word on how it ended, when it did not exit 0
    lost: dict[str, str] = {}
    for line in step.srun_said:
        if found := _STATUS.match(line):
            ended.update((task, found["word"]) for task in _tasks(found["tasks"]))
        elif found := _LOST.search(line):
            lost[found["node"]] = line.removeprefix("srun: error: ")
    timed_out = step.timed_out or any("DUE TO TIME LIMIT" in line for line in _all_lines(step))
    answers = {}
    for node in dict.fromkeys(layout):
        tasks = [t for t, n in enumerate(layout) if n == node]
        if node in lost and not any(step.stdout.get(t) for t in tasks):
            answers[node] = Answer(None, unreachable=lost[node])
            continue
        words = [ended[t] for t in tasks if t in ended]
        codes = [int(m[1]) for w in words if (m := _EXITED.search(w))]
        killed = [w for w in words if not _EXITED.search(w)]
        report, whole = next((_restored(bytes(step.stdout[t])) for t in tasks if step.stdout.get(t)), (b"", False))
        ran = not step.timed_out or whole  # cut off at --timeout, unless its whole report had come
        answers[node] = Answer(
            None if killed or not ran else max(codes, default=0),
            stdout=report,
            stderr="\n".join(line for t in tasks for line in step.stderr.get(t, ())),
            timed_out=not ran or (timed_out and bool(killed)),
            failure=f"srun: task {killed[0]}" if killed else None,
        )
    return answers


def _tasks(text: str) -> list[int]:
    found: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            found += range(int(low), int(high or low) + 1)
    return found


def _all_lines(step: StepOutput) -> list[str]:
    return [*step.srun_said, *(line for lines in step.stderr.values() for line in lines)]


def _restored(raw: bytes) -> tuple[bytes, bool]:
    """A report as verify printed it (srun's lines joined without their ends, written out again alike),
    and whether it is whole JSON."""
    try:
        return json_text(json.loads(raw)).encode("utf-8"), True
    except (ValueError, RecursionError):
        return raw, False  # cut short, or not JSON: judged (and kept) as it came


def own_job(env: Mapping[str, str]) -> dict[str, str]:
    """srun's environment: a job of its own, whatever job gpuenv runs in (an sbatch script's SLURM_JOB_ID,
    SLURM_NNODES, ... would make it a step of that job, on that job's nodes); SLURM_CONF is kept."""
    return {k: v for k, v in env.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def allocation_failed(step: StepOutput) -> str | None:
    """srun's message when it started no task at all (it could not get the nodes), else None."""
    if step.rc == 0 or step.stdout or step.stderr or step.timed_out or step.interrupted:
        return None
    said = [line.removeprefix("srun: ").strip() for line in step.srun_said if line.strip()]
    return "; ".join(said[-2:]) or f"srun exited {step.rc}"


# --- the service -----------------------------------------------------------------------------


def prepare(request: FleetVerifyRequest, *, now: datetime | None = None) -> SlurmPlan:
    """Check everything before srun starts: the nodes and what Slurm says of each, files, folders, history."""
    validate.absolute_path(request.venv, "--venv")
    if request.retry_failed is not None and request.nodelist is not None:
        raise BadRequest("--retry-failed and --nodelist exclude each other", hint="use one")
    retried = retried_hosts(request)
    asked = expand_nodelist(request.nodelist) if request.nodelist is not None else retried
    inputs = inputs_document(request)
    reports_dir = reports_folder(request, now)
    check_history(request)
    if asked == ():
        return SlurmPlan(request, (), {}, inputs, reports_dir, request.history)
    rows = node_rows(request.partition)
    nodes = pick_nodes(rows, asked, request.partition)
    check_multi_node(request, nodes)
    states = {r.node: r.state for r in rows}
    unavailable = {n: why for n in nodes if (why := why_unavailable(states[n].state, states[n].reason))}
    return SlurmPlan(request, nodes, unavailable, inputs, reports_dir, request.history)


def run(plan: SlurmPlan, *, on_host: Callable[[HostOutcome], None]) -> FleetVerifyResult:
    """One srun step over the nodes Slurm can start a task on; each node judged; summary, history, fleet report."""
    if not plan.nodes:
        return FleetVerifyResult((), plan.reports_dir, "nothing to retry", plan.history, hints=SLURM_HINTS)
    plan.reports_dir.mkdir(parents=True, exist_ok=True)
    collected = Collector(plan.reports_dir, plan.request.venv, on_host)
    for node, why in plan.unavailable.items():
        collected.say(HostOutcome(node, "unreachable", None, why))
    status = _run_step(plan, collected) if plan.usable else "successful"
    return collected.finish(status, plan.history, plan.nodes, hints=SLURM_HINTS)


def _run_step(plan: SlurmPlan, collected: Collector) -> str:
    request, nodes = plan.request, plan.usable
    layout = [n for n in nodes for _ in range(ranks_per_node(request))]
    job = f"gpuenv-fleet-verify-{secrets.token_hex(4)}"
    work = Path(tempfile.mkdtemp(prefix="gpuenv-fleet-srun-"))
    try:
        hostfile = work / "hostfile"
        hostfile.write_text("\n".join(layout) + "\n", encoding="utf-8")
        step = run_step(
            srun_arguments(request, tasks=len(layout), job_name=job, inputs=plan.inputs is not None),
            stdin=None if plan.inputs is None else plan.inputs.encode("utf-8"),
            env={**own_job(os.environ), "SLURM_HOSTFILE": str(hostfile)},
            timeout_s=request.timeout_s,
            job_name=job,
            work=work,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if step.interrupted is not None:
        raise Interrupted(
            f"interrupted by {step.interrupted}: the srun step was stopped (job {job})",
            hint="run gpuenv fleet verify --slurm again",
        )
    if (failed := allocation_failed(step)) is not None:
        for node in nodes:
            collected.say(HostOutcome(node, "could not run", None, f"srun started no task: {failed}"))
        return "failed"
    for node, answer in answers_of(step, layout).items():
        collected.add(node, answer)
    return "timeout" if step.timed_out else "successful" if step.rc == 0 else "failed"
