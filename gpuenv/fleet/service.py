"""`fleet verify`: one request, two fan-outs (Ansible over SSH, gpuenv.fleet.run; one srun step,
gpuenv.fleet.slurm_run), the same outcomes, reports, summary, history and fleet report."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from gpuenv import validate
from gpuenv.errors import BadRequest
from gpuenv.fleet import run as over_ansible
from gpuenv.fleet import slurm_run as over_slurm
from gpuenv.fleet.collect import FleetVerifyResult, HostOutcome
from gpuenv.fleet.request import FleetVerifyRequest

Plan = over_ansible.FleetPlan | over_slurm.SlurmPlan


def check_fan_out(request: FleetVerifyRequest) -> None:
    """The options of one fan-out are refused with the other's."""
    hosts = request.hosts
    ansible = {
        "HOSTS": hosts.names, "--inventory": hosts.inventory_file, "--user": hosts.user, "--port": hosts.port,
        "--ssh-key": hosts.ssh_key, "--become-password-file": hosts.become_password_file,
        "--ask-become-pass": hosts.ask_become_pass, "--limit": hosts.limit, "--artifacts-dir": request.artifacts_dir,
    }  # fmt: skip
    slurm = {"--nodelist": request.nodelist, "--partition": request.partition}
    given = [name for name, value in (ansible if request.slurm else slurm).items() if value]
    if given and request.slurm:
        raise BadRequest(f"{given[0]} is an option of the Ansible fan-out, not of --slurm", hint=_SLURM_HINT)
    if given:
        raise BadRequest(f"{given[0]} goes with --slurm", hint="add --slurm, or name the hosts for Ansible")


_SLURM_HINT = "--slurm takes the nodes from --nodelist and --partition (default: the default partition's)"


def prepare(request: FleetVerifyRequest, *, prompt: Callable[[str], str], now: datetime | None = None) -> Plan:
    """Everything checked before any host is touched (the become password asked for, over Ansible)."""
    check_fan_out(request)
    if request.site.checks_dir is not None:
        validate.absolute_path(request.site.checks_dir, "--checks-dir")
    if request.slurm:
        return over_slurm.prepare(request, now=now)
    return over_ansible.prepare(request, prompt=prompt, now=now)


def run(plan: Plan, *, on_host: Callable[[HostOutcome], None]) -> FleetVerifyResult:
    """Verify every host of the plan; on_host hears each one as it ends."""
    if isinstance(plan, over_slurm.SlurmPlan):
        return over_slurm.run(plan, on_host=on_host)
    return over_ansible.run(plan, on_host=on_host)
