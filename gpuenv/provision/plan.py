"""provision's plan: from a request to a validated project, and from the hosts' facts to a plan.

`prepare_project` validates everything the request says (exit 2 before any host is contacted);
`plan_from_gathered` gives each host that answered gather.yml its stack or a refusal (the pure
per-host resolver, gpuenv.provision.perhost) and its driver decisions. `--render-only` contacts no
host: `prepare_project` then renders one stack resolved from the flags. Applying the plan is
gpuenv.provision.apply.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

from gpuenv import __version__, validate
from gpuenv.ansible.events import HostSummary
from gpuenv.ansible.hosts import Hosts
from gpuenv.ansible.inventory import Inventory, render_inventory
from gpuenv.ansible.loader import become_password, inventory_for
from gpuenv.ansible.project import INVENTORY_FILE
from gpuenv.errors import BadRequest
from gpuenv.files import wheelhouse_files
from gpuenv.fleet.source import OnHost
from gpuenv.kb import KnowledgeBase, load_kb, staleness_warning
from gpuenv.provision import VARS_FILE
from gpuenv.provision.driverplan import driver_plans
from gpuenv.provision.gathered import facts_from_gathered
from gpuenv.provision.options import ProvisionOptions
from gpuenv.provision.perhost import HostPlan, HostRequest, check_request, plan_hosts, request_from, wheelhouse_torch
from gpuenv.provision.variables import kb_facts, render_variables, variables
from gpuenv.resolve.service import resolve
from gpuenv.stack import Stack
from gpuenv.stack_service import StackRequest, Warn, load_stack, local_driver_version
from gpuenv.types import DeviceChoice, Level
from gpuenv.verify.site import programs

SCHEMA = "gpuenv.provision/1"


@dataclass(frozen=True)
class ProvisionRequest:
    """What provision was asked, as given on the command line (paths not yet checked)."""

    hosts: Hosts = field(default_factory=Hosts)
    stack: StackRequest = field(default_factory=StackRequest)
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
    site_checks_dir: Path | None = None  # a checks directory on the controller, for every host
    site_checks_wheel: tuple[Path, ...] = ()  # site check packages on the controller, into every host's venv
    verify_level: Level = "quick"
    verify_device: DeviceChoice = "auto"
    reports_dir: Path = Path("reports")
    min_free_gb: int = 10
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
    inventory = inventory_for(request.hosts)
    password = become_password(request.hosts, prompt)
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
    kb = load_kb(kb_path)
    warning = staleness_warning(kb, date.today())
    if warning and on_warning is not None:
        on_warning(warning)
    return kb


def _host_request(
    request: ProvisionRequest, kb: KnowledgeBase, options: ProvisionOptions
) -> tuple[HostRequest, list[str], ProvisionOptions]:
    """What every host's stack must satisfy: the flags, the wheelhouse's torch, --skip-driver, --stack."""
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
    # the driver options against a stack some host gets: --cuda 13.0 --driver-branch 470 contradicts itself, as
    # --with-container-toolkit does for a ROCm stack
    representative = check_request(kb, host_request)
    variables(representative, options, kb_facts(kb, representative))
    return host_request, notes + ([left_out] if left_out else []), options


def _pinned(request: StackRequest) -> Stack | None:
    if request.stack_file is None:
        return None
    if request.constraints.given() or request.constraints.cpu_arch:
        raise BadRequest(
            "--stack cannot be combined with the stack options (--torch, --cuda, --gpu, --os, --cpu-arch, …)",
            hint="edit the stack file, or resolve again with the constraints",
        )
    return load_stack(request.stack_file)


def _with_one_stack(project: Project) -> Project:
    """--render-only contacts no host: one stack from the flags (the default OS unless --os), rendered."""
    hr, kb = project.host_request, project.kb
    stack = _flags_stack(hr, kb)
    files = {**project.files, VARS_FILE: render_variables(stack, project.options, kb_facts(kb, stack))}
    return replace(project, files=files, stack=stack)


def one_stack(project: Project) -> Stack:
    """The one stack every host is given (--stack's, or the stack options'), for --fleet to judge before anything
    runs; BadRequest when none is given, since each host then gets a stack resolved for its own GPUs."""
    hr = project.host_request
    if hr.pinned is None and not hr.constraints.given():
        raise BadRequest(
            "--fleet judges the stack provision installs: give --stack or the stack options (--torch …)",
            hint="without them each host gets a stack resolved for its own GPUs, which provision checks itself",
        )
    return _flags_stack(hr, project.kb)


def on_host(project: Project) -> OnHost:
    """How provision installs the stack --fleet judges: one stack as it is, on any OS that gives its Python
    (--stack's, --render-only's); else each host's own, resolved on its OS (with --os: on that OS alone)."""
    hr = project.host_request
    stack = hr.pinned or project.stack
    if stack is not None:
        return OnHost(stack.os, stack.python)
    return OnHost.resolved(hr.os_check, hr.constraints.python)


def _flags_stack(hr: HostRequest, kb: KnowledgeBase) -> Stack:
    return hr.pinned or resolve(kb, replace(hr.constraints, os=hr.os_check, gpu=hr.gpu_check))


def _gpuenv_wheel(value: Path | None) -> Path | None:
    if value is None:
        return None
    path = validate.existing_file(validate.safe_path(str(value), "--gpuenv-wheel"), "--gpuenv-wheel")
    if not (path.name.startswith("gpuenv-") and path.name.endswith(".whl")):
        raise BadRequest(f"--gpuenv-wheel {path.name!r} is not a gpuenv wheel", hint="give a gpuenv-VERSION-*.whl file")
    return path.resolve()


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
    site_dir, site_files = _site_checks_dir(request.site_checks_dir)
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
        site_checks_dir=site_dir,
        site_checks_files=site_files,
        site_checks_wheels=tuple(_site_wheel(w) for w in request.site_checks_wheel),
    )


def _site_checks_dir(value: Path | None) -> tuple[str | None, tuple[str, ...]]:
    """The checks directory and the files it ships, checked as verify checks it on the hosts (trust,
    declarations), so a directory verify would refuse never reaches them."""
    if value is None:
        return None, ()
    folder = validate.existing_dir(validate.safe_path(str(value), "--site-checks-dir"), "--site-checks-dir").resolve()
    programs.discover(folder)
    return str(folder), tuple(name for name in sorted(os.listdir(folder)) if not name.startswith("."))


def _site_wheel(value: Path) -> str:
    path = validate.existing_file(validate.safe_path(str(value), "--site-checks-wheel"), "--site-checks-wheel")
    if path.suffix != ".whl":
        raise BadRequest(f"--site-checks-wheel {path.name!r} is not a wheel", hint="give a NAME-VERSION-*.whl file")
    return str(path.resolve())


def plan_from_gathered(
    project: Project, gathered: dict[str, dict[str, Any]], summaries: dict[str, HostSummary], status: str
) -> ProvisionResult:
    """The plan: a stack or a refusal per host that answered, and its driver decisions. Pure."""
    names = [n for n in project.inventory.names if n in gathered]
    facts = [facts_from_gathered(n, gathered[n], project.kb) for n in names]
    host_plans = tuple(plan_hosts(project.kb, project.host_request, facts))
    plans = driver_plans(project.kb, project.options, host_plans)
    hosts = tuple(summaries[n] for n in project.inventory.names if n in summaries)
    return ProvisionResult(hosts, status, False, plans, host_plans, project.notes)


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
