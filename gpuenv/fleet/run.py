"""fleet verify's application service over Ansible: one command per host, its report on stdout.

It drives Ansible as provision does, through gpuenv.ansible (the hosts, inventory and become
password, the shipped playbooks, ansible-runner's arguments and events) and the one adapter that
runs Ansible (gpuenv.adapters.ansible, with its interrupt guard). The play is
playbooks/fleet_verify.yml: one task, one module run and SSH round trip per host, which runs
gpuenv/fleet/onhost.py's command; each host's result is judged here as its event arrives
(gpuenv.fleet.collect), and never written into ansible-runner's artifacts again.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from gpuenv import validate
from gpuenv.adapters.ansible import run_playbook
from gpuenv.ansible.events import Progress
from gpuenv.ansible.inventory import Inventory, render_inventory
from gpuenv.ansible.loader import become_password, inventory_for
from gpuenv.ansible.project import INVENTORY_FILE, lay_playbooks
from gpuenv.ansible.runner import RunRequest, check_limit, controller_path, runner_arguments
from gpuenv.errors import BadRequest, Interrupted
from gpuenv.fleet.collect import Collector, FleetVerifyResult, HostOutcome
from gpuenv.fleet.onhost import Answer, host_command
from gpuenv.fleet.request import (
    FleetVerifyRequest,
    check_history,
    check_multi_node,
    inputs_document,
    reports_folder,
    retried_hosts,
    verify_arguments,
)
from gpuenv.verify.launch import comm_environment

PLAYBOOK = "fleet_verify.yml"
TASK = "Run gpuenv verify"  # the play's one task: its result is the host's answer
VARS_FILE = "group_vars/all/fleet.yml"
TASK_SLACK_S = 60  # Ansible's own limit on the task: the host's limit, the kill after it, the way back


@dataclass(frozen=True)
class FleetPlan:
    """A validated request: the inventory, the files gpuenv writes, where reports and history go."""

    request: FleetVerifyRequest
    inventory: Inventory
    files: dict[str, str]
    reports_dir: Path
    limit: str | None
    history: Path | None
    password: str | None = None

    @property
    def targets(self) -> tuple[str, ...]:
        return self.inventory.targets(self.limit)


# --- pure: the variables, each host's answer ---------------------------------------------------


def multi_node_variables(request: FleetVerifyRequest, inventory: Inventory, hosts: tuple[str, ...]) -> Any:
    """With --multi-node: the node rank of each host (in inventory order) and the first host's
    address, where its verify hosts the rendezvous store; None without it."""
    if not request.multi_node:
        return None
    first = next(h for h in inventory.hosts if h.name == hosts[0])
    return {
        "nnodes": len(hosts),
        "master_addr": str(first.vars.get("ansible_host", first.name)),
        "master_port": request.master_port,
        "ranks": {host: rank for rank, host in enumerate(hosts)},
    }


def render_variables(request: FleetVerifyRequest, *, inputs: str | None, multi_node: Any = None) -> str:
    """group_vars/all/fleet.yml, written as JSON (which YAML reads the same): data only, no templates."""
    command = partial(
        host_command,
        verify_arguments(request),
        venv=request.venv,
        host_timeout_s=request.host_timeout_s,
        inputs=inputs is not None,
    )
    data = {
        "fleet_argv": command(),
        "fleet_argv_by_host": None if multi_node is None else _by_host(command, multi_node),
        "fleet_inputs": inputs,
        "fleet_task_timeout": request.host_timeout_s + TASK_SLACK_S,
        # NCCL_*, GLOO_*, ... as set here, passed to every host's verify (and recorded in its report)
        "fleet_env": {k: v for k, v in comm_environment(os.environ).items() if not k.startswith("MASTER_")},
    }
    return "# Written by gpuenv fleet verify from validated values.\n" + json.dumps(data, indent=2) + "\n"


def _by_host(command: Callable[..., list[str]], multi: Any) -> dict[str, list[str]]:
    """Each host's command in a run across the hosts: its node rank, the rendezvous, its name."""
    common = ["--nnodes", str(multi["nnodes"]), "--master-addr", multi["master_addr"]]
    common += ["--master-port", str(multi["master_port"])]
    return {
        host: command(launched=[*common, "--node-rank", str(rank), "--node-name", host])
        for host, rank in multi["ranks"].items()
    }


def answer_of(progress: Progress) -> Answer | None:
    """The host's answer, from the event that ended the play's task on it (None for any other event)."""
    if progress.task != TASK or progress.status not in ("ok", "changed", "failed", "ignored", "unreachable"):
        return None
    res = progress.result or {}
    said = str(res.get("msg") or "").strip()
    if progress.status == "unreachable":
        return Answer(None, unreachable=said or "Ansible could not reach the host")
    rc = res.get("rc")
    return Answer(
        rc if isinstance(rc, int) else None,
        stdout=str(res.get("stdout") or "").encode("utf-8"),
        stderr=str(res.get("stderr") or ""),
        timed_out="expected time frame" in said,  # the task's own timeout (the host's limit + 60 s) struck
        failure=said or None,
    )


# --- the service -----------------------------------------------------------------------------


def prepare(request: FleetVerifyRequest, *, prompt: Callable[[str], str], now: datetime | None = None) -> FleetPlan:
    """Check everything before Ansible starts: hosts, files, folders, the history; ask for the password."""
    validate.absolute_path(request.venv, "--venv")
    inventory = inventory_for(request.hosts)
    limit = _limit(request)
    inputs = inputs_document(request)
    reports_dir = reports_folder(request, now)
    check_history(request)
    hosts = inventory.targets(limit)
    check_multi_node(request, hosts)
    rendered = {
        VARS_FILE: render_variables(request, inputs=inputs, multi_node=multi_node_variables(request, inventory, hosts)),
        INVENTORY_FILE: render_inventory(inventory),
    }
    password = become_password(request.hosts, prompt)
    return FleetPlan(request, inventory, rendered, reports_dir, limit, request.history, password)


def _limit(request: FleetVerifyRequest) -> str | None:
    retried = retried_hosts(request)
    if retried is None:
        return request.hosts.limit
    if request.hosts.limit is not None:
        raise BadRequest("--retry-failed and --limit exclude each other", hint="use one")
    return check_limit(",".join(retried)) if retried else ""


def run(plan: FleetPlan, *, on_host: Callable[[HostOutcome], None]) -> FleetVerifyResult:
    """Run the play on every host, judge each one as it answers; then the summary, history, fleet report."""
    if plan.limit == "":
        return FleetVerifyResult((), plan.reports_dir, "nothing to retry", plan.history)
    plan.reports_dir.mkdir(parents=True, exist_ok=True)
    collected = Collector(plan.reports_dir, plan.request.venv, on_host)
    status = _run_play(plan, collected)
    word = "the run ran past --timeout" if status == "timeout" else "Ansible said nothing of it (see --artifacts-dir)"
    collected.unanswered(plan.targets, outcome="timeout" if status == "timeout" else "could not run", message=word)
    return collected.finish(status, plan.history, plan.targets)


def _run_play(plan: FleetPlan, collected: Collector) -> str:
    keep = plan.request.artifacts_dir
    work = Path(tempfile.mkdtemp(prefix="gpuenv-fleet-")) if keep is None else _artifacts(keep)

    def heard(progress: Progress) -> None:
        answer = answer_of(progress)
        if answer is not None and progress.host not in collected.outcomes:
            collected.add(progress.host, answer)

    try:
        lay_playbooks(work / "project", plan.files)
        outcome = run_playbook(
            runner_arguments(_run_request(plan, work)),
            become_password=plan.password,
            on_progress=heard,
            keep_events=keep is not None,
        )
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if outcome.interrupted is not None:
        raise Interrupted(
            f"interrupted by {outcome.interrupted}: Ansible was stopped; reports so far are in {plan.reports_dir}",
            hint="run gpuenv fleet verify again (--limit to the hosts still to do)",
        )
    return outcome.status


def _artifacts(keep: Path) -> Path:
    work = Path(validate.safe_path(str(keep), "--artifacts-dir")).resolve()
    if (work / "project").exists():
        raise BadRequest(f"--artifacts-dir {work} holds a project already", hint="give a new --artifacts-dir")
    work.mkdir(parents=True, exist_ok=True)
    return work


def _run_request(plan: FleetPlan, work: Path) -> RunRequest:
    return RunRequest(
        project_dir=work / "project",
        private_data_dir=work,
        playbook=PLAYBOOK,
        forks=min(plan.request.hosts.forks, max(1, len(plan.targets))),
        limit=plan.limit,
        ask_become_pass=plan.password is not None,
        timeout_s=plan.request.timeout_s,
        path=controller_path(),
    )
