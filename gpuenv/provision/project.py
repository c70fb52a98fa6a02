"""provision's application service: from a request to a written Ansible project, run through ansible-runner.

`prepare_project` validates everything and renders the two files gpuenv writes (variables and
inventory); `write_project` lays the static playbooks, those files and gpuenv's wheel into a folder;
`run_project` runs it and gathers the per-host summary and the verify reports.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from gpuenv import validate
from gpuenv.errors import BadRequest, Interrupted
from gpuenv.files import owned_entries, wheelhouse_files, write_manifest
from gpuenv.provision import INVENTORY_FILE, VARS_FILE, WHEEL_DIR
from gpuenv.provision.inventory import Inventory, hosts_from_args, load_inventory, with_become, with_defaults
from gpuenv.provision.runner import PLAN, SITE, HostSummary, Progress, RunRequest
from gpuenv.provision.variables import ProvisionOptions
from gpuenv.stack import Stack
from gpuenv.stacks import StackRequest, Warn
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
    """A validated request with its stack and the rendered files (name in the project -> text)."""

    request: ProvisionRequest
    stack: Stack
    inventory: Inventory
    options: ProvisionOptions
    files: dict[str, str]
    password: str | None = None
    wheel: Path | None = None  # gpuenv's wheel to ship; None: build one of the running gpuenv


@dataclass(frozen=True)
class ProvisionResult:
    stack: Stack
    hosts: tuple[HostSummary, ...]
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    check: bool
    plans: dict[str, Any] | None = None  # the driver plan per host, with --plan

    @property
    def exit_code(self) -> int:
        return 0 if all(s.succeeded for s in self.hosts) and self.status != "timeout" else 1

    def rows(self) -> list[dict[str, Any]]:
        return [_host_row(s) for s in self.hosts]

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "status": self.status,
            "check": self.check,
            "stack": self.stack.to_dict(),
            "hosts": self.rows(),
        }
        if self.plans is not None:
            doc["plans"] = self.plans
        return doc


def prepare_project(
    request: ProvisionRequest, *, kb_path: Path | None, prompt: Callable[[str], str], on_warning: Warn | None = None
) -> Project:
    """Check the request and render the variables file and the inventory; prompt asks for the become password."""
    from gpuenv import __version__
    from gpuenv.compat import load_kb
    from gpuenv.provision.inventory import render_inventory
    from gpuenv.provision.variables import kb_facts, render_variables
    from gpuenv.stacks import stack_for

    inventory = inventory_for(request)
    password = become_password(request, prompt)
    stack = stack_for(request.stack, kb_path=kb_path, on_warning=on_warning)
    options = _options(request)
    wheel = _gpuenv_wheel(request.gpuenv_wheel)
    options = replace(options, gpuenv_wheel=wheel.name if wheel else f"gpuenv-{__version__}-py3-none-any.whl")
    files = {
        VARS_FILE: render_variables(stack, options, kb_facts(load_kb(kb_path), stack)),
        INVENTORY_FILE: render_inventory(inventory),
    }
    return Project(request, stack, inventory, options, files, password, wheel)


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


def run_project(project: Project, *, on_progress: Callable[[Progress], None]) -> ProvisionResult:
    """Write the project into a work folder, run it with ansible-runner, gather the summary and reports."""
    from gpuenv.adapters.ansible import run_playbook
    from gpuenv.provision.runner import runner_arguments

    request = project.request
    keep = request.artifacts_dir
    if keep:
        work = Path(validate.safe_path(str(keep), "--artifacts-dir")).resolve()
        _claim_project(work / "project")
    else:
        work = Path(tempfile.mkdtemp(prefix="gpuenv-provision-"))
    started = time.time()
    outcome = None
    try:
        arguments = runner_arguments(_run_request(project, write_project(project, work / "project"), work))
        outcome = run_playbook(arguments, become_password=project.password, on_progress=on_progress)
    finally:
        touched = outcome is not None and outcome.interrupted is not None and bool(outcome.tally.touched)
        if keep is None and not touched:
            shutil.rmtree(work, ignore_errors=True)
    if outcome.interrupted is not None:
        raise _interrupted(outcome.interrupted, sorted(outcome.tally.touched), project.inventory, work)
    summaries = tuple(outcome.tally.hosts.values())
    if not summaries:
        raise BadRequest("no host matched", hint="check --limit against the inventory's host and group names")
    if not (request.plan_only or request.dry_run or request.skip_verify):
        _attach_reports(summaries, Path(project.options.reports_dir), since=started)
    plans = outcome.tally.plans if request.plan_only else None
    return ProvisionResult(project.stack, summaries, outcome.status, request.dry_run, plans)


def _run_request(project: Project, project_dir: Path, work: Path) -> RunRequest:
    request = project.request
    return RunRequest(
        project_dir=project_dir,
        private_data_dir=work,
        playbook=PLAN if request.plan_only else SITE,
        forks=request.forks,
        limit=request.limit,
        check=request.dry_run,
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


def _host_row(s: HostSummary) -> dict[str, Any]:
    state = "unreachable" if s.unreachable else "failed" if s.failed else "ok"
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
        "message": s.message or None,
    }
