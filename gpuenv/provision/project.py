"""provision's application service: from a request to a written Ansible project, run through ansible-runner.

`prepare_project` validates everything the request says (exit 2 before any host is contacted);
`run_project` runs two Ansible passes in one invocation: gather.yml reads each host's facts, the
pure per-host resolver (gpuenv.provision.perhost) gives each host its stack or a refusal, the plan
is shown, and site.yml applies it to the accepted hosts, each group of hosts with the same stack
under its own inventory group and variables file. `render_project` (--render-only) contacts no
host: it renders one stack resolved from the flags.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpuenv import validate
from gpuenv.errors import BadRequest, Interrupted
from gpuenv.files import owned_entries, wheelhouse_files, write_manifest
from gpuenv.provision import INVENTORY_FILE, VARS_FILE, WHEEL_DIR
from gpuenv.provision.inventory import Inventory, hosts_from_args, load_inventory, with_become, with_defaults
from gpuenv.provision.perhost import HostPlan, HostRequest
from gpuenv.provision.runner import GATHER, SITE, HostSummary, Progress, RunRequest
from gpuenv.provision.variables import ProvisionOptions
from gpuenv.stack import Stack
from gpuenv.stacks import StackRequest, Warn

if TYPE_CHECKING:
    from gpuenv.compat import KnowledgeBase
from gpuenv.types import DeviceChoice, Level

SCHEMA = "gpuenv.provision/1"
REPORT_OUTCOMES = ("certified", "not certified", "could not run", "interrupted")


class HostsRequest(Protocol):
    """The hosts, SSH and become part of a request (provision's and fleet verify's share it)."""

    @property
    def hosts(self) -> tuple[str, ...]: ...
    @property
    def inventory_file(self) -> Path | None: ...
    @property
    def user(self) -> str | None: ...
    @property
    def port(self) -> int | None: ...
    @property
    def ssh_key(self) -> Path | None: ...
    @property
    def become_method(self) -> str: ...
    @property
    def become_password_file(self) -> Path | None: ...
    @property
    def ask_become_pass(self) -> bool: ...


@dataclass(frozen=True)
class ProvisionRequest:
    """What provision was asked, as given on the command line (paths not yet checked)."""

    hosts: tuple[str, ...] = ()
    inventory_file: Path | None = None
    stack: StackRequest = field(default_factory=StackRequest)
    user: str | None = None
    port: int | None = None
    ssh_key: Path | None = None
    become_method: str = "sudo"
    become_password_file: Path | None = None
    ask_become_pass: bool = False
    driver_branch: str | None = None
    driver_source: str = "auto"
    kernel_modules: str = "auto"
    allow_secure_boot: bool = False
    no_reboot: bool = False
    skip_driver: bool = False
    skip_verify: bool = False
    with_container_toolkit: bool = False
    venv: str = "/opt/gpuenv/venv"
    wheelhouse: Path | None = None
    index_url: str | None = None
    gpuenv_wheel: Path | None = None
    torch_only: bool = False
    verify_level: Level = "quick"
    verify_device: DeviceChoice = "auto"
    reports_dir: Path = Path("reports")
    min_free_gb: int = 10
    forks: int = 10
    limit: str | None = None
    timeout_s: int = 4 * 3600
    dry_run: bool = False
    plan_only: bool = False
    render_only: Path | None = None
    artifacts_dir: Path | None = None


@dataclass(frozen=True)
class Project:
    """A validated request: inventory, options, what every host's stack must satisfy, rendered files."""

    request: ProvisionRequest
    kb: KnowledgeBase
    host_request: HostRequest
    inventory: Inventory
    options: ProvisionOptions
    files: dict[str, str]  # name in the project -> text
    password: str | None = None
    wheel: Path | None = None  # gpuenv's wheel to ship; None: build one of the running gpuenv
    notes: tuple[str, ...] = ()  # where constraints came from, what was left out
    stack: Stack | None = None  # --render-only: the one stack resolved from the flags


@dataclass(frozen=True)
class ProvisionResult:
    hosts: tuple[HostSummary, ...]
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    check: bool
    plans: dict[str, Any] | None = None  # the driver plan per host, with --plan
    host_plans: tuple[HostPlan, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        refused = any(p.refused for p in self.host_plans)
        return 0 if all(s.succeeded for s in self.hosts) and self.status != "timeout" and not refused else 1

    @property
    def stack(self) -> Stack | None:
        """The stack every accepted host shares, or None when they differ."""
        stacks = {json.dumps(p.stack.to_dict(), sort_keys=True): p.stack for p in self.host_plans if p.stack}
        return next(iter(stacks.values())) if len(stacks) == 1 else None

    def rows(self) -> list[dict[str, Any]]:
        plans = {p.host: p for p in self.host_plans}
        driver = self.plans or {}
        return [_host_row(s, plans.get(s.host), driver.get(s.host)) for s in self.hosts]

    def to_dict(self) -> dict[str, Any]:
        stack = self.stack
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "status": self.status,
            "check": self.check,
            "stack": stack.to_dict() if stack else None,
            "notes": list(self.notes),
            "hosts": self.rows(),
        }
        if self.plans is not None:
            doc["plans"] = self.plans
        return doc


def prepare_project(
    request: ProvisionRequest, *, kb_path: Path | None, prompt: Callable[[str], str], on_warning: Warn | None = None
) -> Project:
    """Check the request (exit 2 for one no host could satisfy); prompt asks for the become password."""
    from gpuenv import __version__
    from gpuenv.provision.inventory import render_inventory

    inventory = inventory_for(request)
    password = become_password(request, prompt)
    options = _options(request)
    kb = _kb(kb_path, on_warning)
    host_request, notes, options = _host_request(request, kb, options)
    wheel = _gpuenv_wheel(request.gpuenv_wheel)
    options = replace(options, gpuenv_wheel=wheel.name if wheel else f"gpuenv-{__version__}-py3-none-any.whl")
    files = {INVENTORY_FILE: render_inventory(inventory)}
    project = Project(request, kb, host_request, inventory, options, files, password, wheel, tuple(notes))
    if request.render_only is not None:
        return _with_one_stack(project)
    return project


def _kb(kb_path: Path | None, on_warning: Warn | None) -> KnowledgeBase:
    from datetime import date

    from gpuenv.compat import load_kb, staleness_warning

    kb = load_kb(kb_path)
    warning = staleness_warning(kb, date.today())
    if warning and on_warning is not None:
        on_warning(warning)
    return kb


def _host_request(
    request: ProvisionRequest, kb: KnowledgeBase, options: ProvisionOptions
) -> tuple[HostRequest, list[str], ProvisionOptions]:
    """What every host's stack must satisfy: the flags, the wheelhouse's torch, --skip-driver, --stack."""
    from gpuenv.provision.perhost import check_request, request_from, wheelhouse_torch
    from gpuenv.provision.variables import driver_branch, kb_facts
    from gpuenv.stacks import local_driver_version

    constraints, pinned = request.stack.constraints, _pinned(request.stack)
    if constraints.driver == "auto":
        constraints = replace(constraints, driver=local_driver_version())
    wheels = (
        wheelhouse_torch([p.name for p in wheelhouse_files(Path(options.wheelhouse))]) if options.wheelhouse else None
    )
    left_out = ""
    if wheels and wheels.torch and not options.torch_only and not (wheels.has_torchvision and wheels.has_torchaudio):
        options = replace(options, torch_only=True)
        lacking = [
            n for n, has in (("torchvision", wheels.has_torchvision), ("torchaudio", wheels.has_torchaudio)) if not has
        ]
        left_out = f"torchvision and torchaudio left out: the wheelhouse has no {' and no '.join(lacking)}"
    host_request, notes = request_from(
        constraints, wheels=wheels, skip_driver=request.skip_driver, pinned=pinned, torch_only=options.torch_only
    )
    representative = check_request(kb, host_request)
    if not representative.cpu_only:  # --cuda 13.0 --driver-branch 470: the request contradicts itself
        driver_branch(representative, options, kb_facts(kb, representative))
    return host_request, notes + ([left_out] if left_out else []), options


def _pinned(request: StackRequest) -> Stack | None:
    from gpuenv.stack import load_stack

    if request.stack_file is None:
        return None
    if request.constraints.given():
        raise BadRequest(
            "--stack cannot be combined with --torch/--cuda/--driver/--python/--gpu/--os",
            hint="edit the stack file, or resolve again with the constraints",
        )
    return load_stack(request.stack_file)


def _with_one_stack(project: Project) -> Project:
    """--render-only contacts no host: one stack from the flags (the default OS unless --os), rendered."""
    from gpuenv.provision.perhost import cpu_stack
    from gpuenv.provision.variables import kb_facts, render_variables
    from gpuenv.resolve import resolve

    hr, kb = project.host_request, project.kb
    stack = hr.pinned or resolve(kb, replace(hr.constraints, os=hr.os_check, gpu=hr.gpu_check))
    if hr.cpu_wheels and not stack.cpu_only:
        stack = cpu_stack(kb, stack)
    files = {**project.files, VARS_FILE: render_variables(stack, project.options, kb_facts(kb, stack))}
    return replace(project, files=files, stack=stack)


def _gpuenv_wheel(value: Path | None) -> Path | None:
    if value is None:
        return None
    path = validate.existing_file(validate.safe_path(str(value), "--gpuenv-wheel"), "--gpuenv-wheel")
    if not (path.name.startswith("gpuenv-") and path.name.endswith(".whl")):
        raise BadRequest(f"--gpuenv-wheel {path.name!r} is not a gpuenv wheel", hint="give a gpuenv-VERSION-*.whl file")
    return path.resolve()


def inventory_for(request: HostsRequest) -> Inventory:
    """The request's hosts (arguments or inventory) with its SSH defaults and become settings, validated."""
    if request.hosts and request.inventory_file:
        raise BadRequest("give HOST arguments or -i INVENTORY, not both", hint="put every host in the inventory")
    if request.inventory_file is not None:
        inventory = load_inventory(validate.existing_file(str(request.inventory_file), "inventory"))
    else:
        inventory = hosts_from_args(request.hosts)
    key = request.ssh_key
    if key is not None:
        key = validate.existing_file(validate.safe_path(str(key), "--ssh-key"), "--ssh-key").resolve()
    defaults = {
        "ansible_user": request.user or "root",
        "ansible_port": request.port,
        "ansible_ssh_private_key_file": str(key) if key is not None else None,
    }
    return with_become(with_defaults(inventory, defaults), method=request.become_method)


def become_password(request: HostsRequest, prompt: Callable[[str], str]) -> str | None:
    """From a private file (mode 0600) or the prompt; never from the command line or the environment."""
    path, ask = request.become_password_file, request.ask_become_pass
    if path is not None and ask:
        raise BadRequest("--become-password-file and --ask-become-pass exclude each other", hint="use one")
    if ask:
        return prompt("BECOME password")
    if path is None:
        return None
    file = validate.private_file(str(path), "--become-password-file")
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRequest(
            f"cannot read --become-password-file: {type(exc).__name__}", hint="give a readable file"
        ) from exc
    if not lines or not lines[0]:
        raise BadRequest("--become-password-file is empty", hint="write the password on its first line")
    return lines[0]


def _options(request: ProvisionRequest) -> ProvisionOptions:
    wheelhouse = request.wheelhouse
    if wheelhouse is not None:
        checked = validate.safe_path(str(wheelhouse), "--wheelhouse")
        wheelhouse = validate.existing_dir(checked, "--wheelhouse").resolve()
        if not any(w.suffix == ".whl" for w in wheelhouse_files(wheelhouse)):
            raise BadRequest(
                f"--wheelhouse {wheelhouse} holds no wheels",
                hint="fill it with: pip download -d DIR torch==VERSION ...",
            )
    reports = Path(validate.safe_path(str(request.reports_dir), "--reports-dir")).resolve()
    return ProvisionOptions(
        venv=request.venv,
        wheelhouse=str(wheelhouse) if wheelhouse else None,
        index_url=request.index_url,
        torch_only=request.torch_only,
        driver=not request.skip_driver,
        driver_branch=request.driver_branch,
        driver_source=request.driver_source,
        kernel_modules=request.kernel_modules,
        allow_secure_boot=request.allow_secure_boot,
        reboot=not request.no_reboot,
        container_toolkit=request.with_container_toolkit,
        verify=not request.skip_verify,
        verify_level=request.verify_level,
        verify_device=request.verify_device,
        reports_dir=str(reports),
        min_free_gb=request.min_free_gb,
    )


def lay_playbooks(dest: Path, files: dict[str, str]) -> None:
    """The shipped playbooks into dest, then the rendered files (name in the project -> text)."""
    from gpuenv.resources import shipped_dir

    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(shipped_dir("playbooks"), dest, ignore=ignore, dirs_exist_ok=True)
    for name, text in files.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_text(text, encoding="utf-8")


def write_project(project: Project, dest: Path) -> Path:
    """The static playbooks, the two rendered files, and gpuenv's own wheel under files/."""
    from gpuenv.selfwheel import build_own_wheel

    lay_playbooks(dest, project.files)
    if project.wheel is None:
        build_own_wheel(dest / WHEEL_DIR)
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
) -> Any:
    """One ansible-runner pass; an interrupt becomes Interrupted naming the hosts it touched."""
    from gpuenv.adapters.ansible import run_playbook
    from gpuenv.provision.runner import runner_arguments

    private.mkdir(parents=True, exist_ok=True)
    arguments = runner_arguments(_run_request(project, project_dir, private, playbook, check=check))
    outcome = run_playbook(arguments, become_password=project.password, on_progress=on_progress)
    if outcome.interrupted is not None:
        work = project_dir.parent
        raise _interrupted(outcome.interrupted, sorted(outcome.tally.touched), project.inventory, work)
    if not outcome.tally.hosts:
        raise BadRequest("no host matched", hint="check --limit against the inventory's host and group names")
    return outcome


def plan_from_gathered(
    project: Project, gathered: dict[str, dict[str, Any]], summaries: dict[str, HostSummary], status: str
) -> ProvisionResult:
    """The plan: a stack or a refusal per host that answered, and its driver decisions. Pure."""
    from gpuenv.provision.driverplan import driver_plans
    from gpuenv.provision.hostfacts import facts_from_gathered
    from gpuenv.provision.perhost import plan_hosts

    names = [n for n in project.inventory.names if n in gathered]
    facts = [facts_from_gathered(n, gathered[n], project.kb) for n in names]
    host_plans = tuple(plan_hosts(project.kb, project.host_request, facts))
    plans = driver_plans(project.kb, project.options, host_plans)
    hosts = tuple(summaries[n] for n in project.inventory.names if n in summaries)
    return ProvisionResult(hosts, status, False, plans, host_plans, project.notes)


def _check_wheelhouse(project: Project, host_plans: tuple[HostPlan, ...]) -> None:
    """With --wheelhouse: pip on this machine says whether it holds everything the hosts will install."""
    if not project.options.wheelhouse:
        return
    from gpuenv.provision.wheelhouse import check_wheelhouse

    check_wheelhouse(Path(project.options.wheelhouse), host_plans, torch_only=project.options.torch_only)


def _write_groups(project: Project, project_dir: Path, host_plans: tuple[HostPlan, ...]) -> None:
    """The accepted hosts only, each group of hosts sharing a stack in its own inventory group and variables file."""
    from gpuenv.files import write_manifest
    from gpuenv.provision.inventory import render_inventory
    from gpuenv.provision.variables import kb_facts, render_variables

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
    for name, text in files.items():
        (project_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (project_dir / name).write_text(text, encoding="utf-8")
    write_manifest(project_dir, [p.name for p in project_dir.iterdir()])


def _run_request(project: Project, project_dir: Path, work: Path, playbook: str, *, check: bool) -> RunRequest:
    request = project.request
    return RunRequest(
        project_dir=project_dir,
        private_data_dir=work,
        playbook=playbook,
        forks=request.forks,
        limit=request.limit,
        check=check,
        ask_become_pass=project.password is not None,
        timeout_s=request.timeout_s,
        path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    )


def _attach_reports(summaries: tuple[HostSummary, ...], reports_dir: Path, *, since: float) -> None:
    for s in summaries:
        path = reports_dir / f"{s.host}.json"
        if not path.is_file() or path.stat().st_mtime < since - 1:
            continue
        s.report = str(path)
        s.verdict = report_outcome(path)


def report_outcome(path: Path) -> str:
    """The verdict a host's report gives; a host's file is input like any other: capped, and checked."""
    return report_verdict(path)[0]


def report_verdict(path: Path) -> tuple[str, str | None]:
    """A host's report's outcome ("unreadable report" when it is not one) and its verdict's summary."""
    from gpuenv.errors import GpuenvError
    from gpuenv.files import read_text
    from gpuenv.schema import parse_json

    try:
        data = parse_json(read_text(path, "host report"))
    except (GpuenvError, ValueError):
        return "unreadable report", None
    verdict = data.get("verdict") if isinstance(data, dict) else None
    outcome = verdict.get("outcome") if isinstance(verdict, dict) else None
    if outcome not in REPORT_OUTCOMES:
        return "unreadable report", None
    summary = verdict.get("summary") if isinstance(verdict, dict) else None
    return outcome, summary if isinstance(summary, str) else None


def _interrupted(signame: str, touched: list[str], inventory: Inventory, work: Path) -> Interrupted:
    if not touched:
        return Interrupted(f"interrupted by {signame}: Ansible was stopped before it touched any host")
    untouched = [h for h in inventory.names if h not in touched]
    message = f"interrupted by {signame}: Ansible was stopped; state unknown on {', '.join(touched)}"
    if untouched:
        message += f"; not started on {', '.join(untouched)}"
    return Interrupted(message, hint=f"the project and its events are kept in {work}; rerun provision to finish")


def _host_row(s: HostSummary, plan: HostPlan | None, driver: dict[str, Any] | None) -> dict[str, Any]:
    state = "unreachable" if s.unreachable else "failed" if s.failed else "refused" if plan and plan.refused else "ok"
    return {
        "host": s.host,
        "status": state,
        "ok": s.ok,
        "changed": s.changed,
        "failed": s.failed,
        "unreachable": s.unreachable,
        "skipped": s.skipped,
        "verify": s.verdict,
        "report": s.report,
        "message": s.message or (plan.refused if plan else None) or None,
        "facts": plan.facts.to_dict() if plan else None,
        "stack": plan.stack.to_dict() if plan and plan.stack else None,
        "refused": plan.refused if plan else None,
        "warnings": list(plan.warnings) if plan else [],
        "driver": driver_action(driver) if driver else None,
    }


def driver_action(plan: dict[str, Any]) -> str:
    """One line: install / upgrade / keep / skip / blocked, and whether a reboot is needed."""
    return str(plan.get("action_line") or plan.get("summary") or plan.get("action"))
