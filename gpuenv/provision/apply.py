"""provision's apply: the project written, and run through ansible-runner in two passes.

`run_project` runs gather.yml (each host's facts), makes the plan (gpuenv.provision.plan), shows
it, and runs site.yml on the accepted hosts, each group of hosts with the same stack under its own
inventory group and variables file. `render_project` (--render-only) writes the project and runs
nothing.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gpuenv import validate
from gpuenv.adapters.ansible import RunOutcome, run_playbook
from gpuenv.ansible.events import HostSummary, Progress
from gpuenv.ansible.inventory import Inventory, render_inventory
from gpuenv.ansible.project import GATHER, INVENTORY_FILE, SITE, lay_playbooks, write_files
from gpuenv.ansible.runner import RunRequest, controller_path, runner_arguments
from gpuenv.errors import BadRequest, Interrupted
from gpuenv.files import owned_entries, write_manifest
from gpuenv.provision import WHEEL_DIR
from gpuenv.provision.perhost import HostPlan
from gpuenv.provision.plan import Project, ProvisionResult, plan_from_gathered
from gpuenv.provision.variables import kb_facts, render_variables
from gpuenv.provision.wheelhouse import check_wheelhouse
from gpuenv.selfwheel import own_wheel
from gpuenv.verify import reportfile


def write_project(project: Project, dest: Path) -> Path:
    """The static playbooks, the two rendered files, and gpuenv's own wheel under files/."""
    lay_playbooks(dest, project.files)
    if project.wheel is None:
        own_wheel(dest / WHEEL_DIR)
    else:
        (dest / WHEEL_DIR).mkdir(parents=True, exist_ok=True)
        shutil.copy2(project.wheel, dest / WHEEL_DIR / project.wheel.name)
    write_manifest(dest, [p.name for p in dest.iterdir()])
    return dest


def _claim_project(project: Path) -> None:
    """A project left by an earlier run with the same --artifacts-dir is replaced; anything else is refused."""
    if not (project.exists() or project.is_symlink()):
        return
    if project.is_symlink() or not project.is_dir() or not owned_entries(project):
        raise BadRequest(
            f"--artifacts-dir: {project} exists and is not a project gpuenv wrote",
            hint="give a new --artifacts-dir, or move that directory away",
        )
    shutil.rmtree(project)


def render_project(project: Project, dest: Path) -> Path:
    """--render-only: the project into a new or empty folder, for plain ansible-playbook."""
    validate.safe_path(str(dest), "--render-only")
    if dest.exists() and any(dest.iterdir()):
        raise BadRequest(f"--render-only {dest} is not empty", hint="give a new or empty directory")
    return write_project(project, dest).resolve()


def run_project(
    project: Project,
    *,
    on_progress: Callable[[Progress], None],
    on_plan: Callable[[ProvisionResult], None] | None = None,
) -> ProvisionResult:
    """Gather every host's facts, plan a stack per host, show the plan, then apply it (unless --plan)."""
    request = project.request
    keep = request.artifacts_dir
    if keep:
        work = Path(validate.safe_path(str(keep), "--artifacts-dir")).resolve()
        _claim_project(work / "project")
    else:
        work = Path(tempfile.mkdtemp(prefix="gpuenv-provision-"))
    touched = False
    try:
        project_dir = write_project(project, work / "project")
        gathered = _run(project, project_dir, work, GATHER, on_progress, check=False)  # its own artifacts/ID
        planned = plan_from_gathered(project, gathered.tally.facts, gathered.tally.hosts, gathered.status)
        if on_plan is not None:
            on_plan(planned)
        _check_wheelhouse(project, planned.host_plans)
        if request.plan_only or not any(p.stack for p in planned.host_plans):
            return planned
        _write_groups(project, project_dir, planned.host_plans)
        started = time.time()
        applied = _run(project, project_dir, work, SITE, on_progress, check=request.dry_run)
        touched = True
    except Interrupted as exc:
        touched = exc.hint is not None  # _interrupted gives a hint (where the events are kept) once a host was touched
        raise
    finally:
        if keep is None and not touched:
            shutil.rmtree(work, ignore_errors=True)
    summaries = {**planned_summaries(planned), **applied.tally.hosts}
    if not (request.dry_run or request.skip_verify):
        _attach_reports(tuple(applied.tally.hosts.values()), Path(project.options.reports_dir), since=started)
    hosts = tuple(summaries[name] for name in project.inventory.names if name in summaries)
    return replace(planned, hosts=hosts, status=applied.status, check=request.dry_run)


def planned_summaries(result: ProvisionResult) -> dict[str, HostSummary]:
    return {s.host: s for s in result.hosts}


def _run(
    project: Project,
    project_dir: Path,
    private: Path,
    playbook: str,
    on_progress: Callable[[Progress], None],
    *,
    check: bool,
) -> RunOutcome:
    """One ansible-runner pass; an interrupt becomes Interrupted naming the hosts it touched."""
    private.mkdir(parents=True, exist_ok=True)
    arguments = runner_arguments(_run_request(project, project_dir, private, playbook, check=check))
    outcome = run_playbook(arguments, become_password=project.password, on_progress=on_progress)
    if outcome.interrupted is not None:
        work = project_dir.parent
        raise _interrupted(outcome.interrupted, sorted(outcome.tally.touched), project.inventory, work)
    if not outcome.tally.hosts:
        raise BadRequest("no host matched", hint="check --limit against the inventory's host and group names")
    return outcome


def _check_wheelhouse(project: Project, host_plans: tuple[HostPlan, ...]) -> None:
    """With --wheelhouse: pip on this machine says whether it holds everything the hosts will install."""
    if not project.options.wheelhouse:
        return
    check_wheelhouse(Path(project.options.wheelhouse), host_plans, torch_only=project.options.torch_only)


def _write_groups(project: Project, project_dir: Path, host_plans: tuple[HostPlan, ...]) -> None:
    """The accepted hosts only, each group of hosts sharing a stack in its own inventory group and variables file."""
    groups: dict[str, list[HostPlan]] = {}
    for plan in host_plans:
        if plan.stack is not None:
            groups.setdefault(json.dumps(plan.stack.to_dict(), sort_keys=True), []).append(plan)
    accepted = {p.host for members in groups.values() for p in members}
    inventory = replace(
        project.inventory,
        hosts=tuple(h for h in project.inventory.hosts if h.name in accepted),
        groups={g: tuple(m for m in hosts if m in accepted) for g, hosts in project.inventory.groups.items()},
    )
    files = {}
    for number, members in enumerate(groups.values(), start=1):
        name = f"gpuenv_stack_{number}"
        inventory.groups[name] = tuple(p.host for p in members)
        stack = members[0].stack
        assert stack is not None
        files[f"inventory/group_vars/{name}.yml"] = render_variables(
            stack, project.options, kb_facts(project.kb, stack)
        )
    files[INVENTORY_FILE] = render_inventory(inventory)
    write_files(project_dir, files)
    write_manifest(project_dir, [p.name for p in project_dir.iterdir()])


def _run_request(project: Project, project_dir: Path, work: Path, playbook: str, *, check: bool) -> RunRequest:
    request = project.request
    return RunRequest(
        project_dir=project_dir,
        private_data_dir=work,
        playbook=playbook,
        forks=request.hosts.forks,
        limit=request.hosts.limit,
        check=check,
        ask_become_pass=project.password is not None,
        timeout_s=request.timeout_s,
        path=controller_path(),
    )


def _attach_reports(summaries: tuple[HostSummary, ...], reports_dir: Path, *, since: float) -> None:
    for s in summaries:
        path = reports_dir / f"{s.host}.json"
        if not path.is_file() or path.stat().st_mtime < since - 1:
            continue
        s.report = str(path)
        s.verdict = reportfile.verdict_of(path)[0]


def _interrupted(signame: str, touched: list[str], inventory: Inventory, work: Path) -> Interrupted:
    if not touched:
        return Interrupted(f"interrupted by {signame}: Ansible was stopped before it touched any host")
    untouched = [h for h in inventory.names if h not in touched]
    message = f"interrupted by {signame}: Ansible was stopped; state unknown on {', '.join(touched)}"
    if untouched:
        message += f"; not started on {', '.join(untouched)}"
    return Interrupted(message, hint=f"the project and its events are kept in {work}; rerun provision to finish")
