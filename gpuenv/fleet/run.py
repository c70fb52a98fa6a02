"""fleet verify's application service: run every host's installed gpuenv verify over Ansible.

It drives Ansible as provision does, through gpuenv.ansible (the hosts, inventory and become
password, the shipped playbooks, ansible-runner's arguments and events) and the one adapter that
runs Ansible (gpuenv.adapters.ansible, with its interrupt guard). The play is
playbooks/fleet_verify.yml; gpuenv renders only its variables and the inventory.

Each host ends with one outcome (OUTCOMES); the run writes them to SUMMARY_FILE beside the
reports, which is what `--retry-failed DIR` reads back.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuenv import validate
from gpuenv.adapters.ansible import run_playbook
from gpuenv.ansible.events import HostSummary, Progress
from gpuenv.ansible.hosts import Hosts
from gpuenv.ansible.inventory import Inventory, render_inventory
from gpuenv.ansible.loader import become_password, inventory_for
from gpuenv.ansible.project import INVENTORY_FILE, lay_playbooks
from gpuenv.ansible.runner import RunRequest, check_limit, controller_path, runner_arguments
from gpuenv.errors import BadRequest, GpuenvError, Interrupted
from gpuenv.files import read_text, write_atomic
from gpuenv.fleet import stats
from gpuenv.fleet.history import connect, gpu_events, ingest_read
from gpuenv.fleet.report_compare import compare, failures_by_code
from gpuenv.fleet.report_model import FleetReport, HostReport, Skipped
from gpuenv.fleet.report_reading import entry_of
from gpuenv.types import OUTCOMES, REPORT_OUTCOMES, DeviceChoice, Level, Outcome, outcome_named
from gpuenv.verify import reportfile
from gpuenv.verify.launch import comm_environment
from gpuenv.verify.options import SiteOptions
from gpuenv.verify.reportfile import FLEET_VERIFY_SCHEMA as SCHEMA
from gpuenv.verify.reportfile import ReportFile

SUMMARY_FILE = "fleet-verify.json"
PLAYBOOK = "fleet_verify.yml"
VARS_FILE = "group_vars/all/fleet.yml"
HINTS = {"not provisioned": "run gpuenv provision", "unreachable": "check SSH to the host"}


@dataclass(frozen=True)
class FleetVerifyRequest:
    """What fleet verify was asked, as given on the command line (paths not yet checked)."""

    hosts: Hosts = field(default_factory=Hosts)
    level: Level = "quick"
    checks: tuple[str, ...] = ()
    device: DeviceChoice = "auto"
    expect_gpus: int | None = None
    strict: bool = False
    baseline: Path | None = None
    policy: Path | None = None
    image: str | None = None
    timeout_s: int = 2 * 3600
    host_timeout_s: int = 1800
    check_timeout_s: float | None = None
    venv: str = "/opt/gpuenv/venv"
    reports_dir: Path | None = None  # default: reports/<UTC start, 20261130T150405Z>
    retry_failed: Path | None = None
    history: Path | None = None  # None: record nothing
    artifacts_dir: Path | None = None
    multi_node: bool = False  # one collective across every host (verify --nnodes/--node-rank/--master-addr)
    site: SiteOptions = field(default_factory=SiteOptions)  # the site checks installed on the hosts, by name
    master_port: int = 29500  # where the first host's rendezvous store listens, with --multi-node


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


@dataclass(frozen=True)
class HostOutcome:
    host: str
    outcome: Outcome
    report: str | None
    message: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "outcome": self.outcome, "report": self.report, "message": self.message}


@dataclass(frozen=True)
class FleetVerifyResult:
    hosts: tuple[HostOutcome, ...]
    reports_dir: Path
    status: str  # ansible-runner's, or "nothing to retry"
    history: Path | None
    history_notes: tuple[str, ...] = ()  # reports the history could not take
    fleet: FleetReport | None = None  # the fleet report over the reports collected

    @property
    def exit_code(self) -> int:
        return 0 if all(h.outcome == "certified" for h in self.hosts) else 1

    def counts(self) -> dict[str, int]:
        return {o: n for o in OUTCOMES if (n := sum(h.outcome == o for h in self.hosts))}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "status": self.status,
            "reports_dir": str(self.reports_dir),
            "counts": self.counts(),
            "hosts": [h.to_dict() for h in self.hosts],
            "history": None if self.history is None else str(self.history),
            "fleet_report": None if self.fleet is None else self.fleet.to_dict(),
        }


# --- pure: verify's arguments, the variables, a host's outcome ------------------------------


def verify_arguments(request: FleetVerifyRequest) -> list[str]:
    """The arguments after `gpuenv verify` on each host (files by the names the play copies them to)."""
    args = ["--level", request.level, "--device", request.device]
    for check in ("allreduce",) if request.multi_node else request.checks:
        args += ["--check", check]
    if request.expect_gpus is not None:
        args += ["--expect-gpus", str(request.expect_gpus)]
    if request.strict:
        args.append("--strict")
    if request.check_timeout_s is not None:
        args += ["--timeout", f"{request.check_timeout_s:g}"]
    if request.image is not None:
        args += ["--image", request.image]
    args += request.site.arguments()  # named as the hosts have them (provision put them there): never copied
    for option, name in _copied(request):
        args += [f"--{option}", name]
    return args


def _copied(request: FleetVerifyRequest) -> list[tuple[str, str]]:
    return [(opt, f"{opt}.json") for opt in ("baseline", "policy") if getattr(request, opt) is not None]


def multi_node_variables(request: FleetVerifyRequest, inventory: Inventory, hosts: tuple[str, ...]) -> Any:
    """With --multi-node: the node rank of each host (in inventory order) and the first host's
    address, where its verify hosts the rendezvous store; the play passes them to each verify."""
    if not request.multi_node:
        return None
    first = next(h for h in inventory.hosts if h.name == hosts[0])
    return {
        "nnodes": len(hosts),
        "master_addr": str(first.vars.get("ansible_host", first.name)),
        "master_port": request.master_port,
        "ranks": {host: rank for rank, host in enumerate(hosts)},
    }


def check_multi_node(request: FleetVerifyRequest, hosts: tuple[str, ...]) -> None:
    """Every host must start its ranks at once, and run the collective check alone."""
    if not request.multi_node:
        return
    if request.checks not in ((), ("allreduce",)) or request.image is not None:
        raise BadRequest("--multi-node runs the collective check alone", hint="drop --check/--image")
    if len(hosts) < 2:
        raise BadRequest("--multi-node needs two hosts or more", hint="name the hosts, or a larger --limit")
    if request.hosts.forks < len(hosts):
        raise BadRequest(
            f"--multi-node: {len(hosts)} hosts must start at once, but --forks is {request.hosts.forks}",
            hint=f"--forks {len(hosts)}",
        )


def render_variables(
    request: FleetVerifyRequest, *, reports_dir: Path, files: dict[str, Path], multi_node: Any = None
) -> str:
    """group_vars/all/fleet.yml, written as JSON (which YAML reads the same): data only, no templates."""
    data = {
        "fleet_venv": request.venv,
        "fleet_verify_args": verify_arguments(request),
        "fleet_files": [{"src": str(files[opt]), "name": name} for opt, name in _copied(request)],
        "fleet_host_timeout": request.host_timeout_s,
        "fleet_reports_dir": str(reports_dir),
        "fleet_multi_node": multi_node,
        # NCCL_*, GLOO_*, ... as set here, passed to every host's verify (and recorded in its report)
        "fleet_env": {k: v for k, v in comm_environment(os.environ).items() if not k.startswith("MASTER_")},
    }
    return "# Written by gpuenv fleet verify from validated values.\n" + json.dumps(data, indent=2) + "\n"


def host_outcome(
    summary: HostSummary | None, verdict: tuple[str, str | None] | None, *, run_status: str
) -> tuple[Outcome, str | None]:
    """A host's outcome and why, from what Ansible said about it and its report's verdict (outcome, summary)."""
    said_all = summary.message.split(": ", 1)[-1] if summary is not None and summary.message else None
    said = outcome_named((said_all or "").split(":", 1)[0])
    outcome, why = verdict or (None, None)
    reported = outcome_named(outcome)
    if summary is None:  # no word from Ansible about it: the run was cut short, or it never got there
        return ("timeout" if run_status == "timeout" else "could not run"), why
    if summary.unreachable:
        return "unreachable", said_all
    if said is not None and said in ("not provisioned", "timeout"):
        return said, said_all
    if reported is not None and reported in REPORT_OUTCOMES:
        return reported, why
    if not summary.failed and outcome is None:
        return "could not run", "no report came back"
    return said or "could not run", said_all or why


def timestamp(moment: datetime) -> str:
    """The name of a run's reports folder: 20261130T150405Z."""
    return moment.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def failed_hosts(summary_text: str, source: str) -> tuple[str, ...]:
    """The hosts of an earlier run's summary whose outcome was not certified."""
    try:
        doc = json.loads(summary_text)
        rows = doc["hosts"] if doc.get("schema") == SCHEMA else None
        failed = tuple(str(r["host"]) for r in rows or [] if r["outcome"] != "certified")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadRequest(f"--retry-failed: {source} is not a fleet verify summary", hint=_RETRY_HINT) from exc
    if rows is None:
        raise BadRequest(f"--retry-failed: {source} is not a fleet verify summary", hint=_RETRY_HINT)
    return failed


_RETRY_HINT = f"give a folder an earlier gpuenv fleet verify wrote its reports and {SUMMARY_FILE} to"


# --- the service -----------------------------------------------------------------------------


def prepare(request: FleetVerifyRequest, *, prompt: Callable[[str], str], now: datetime | None = None) -> FleetPlan:
    """Check everything before Ansible starts: hosts, files, folders, the history; ask for the password."""
    validate.absolute_path(request.venv, "--venv")
    if request.site.checks_dir is not None:
        validate.absolute_path(request.site.checks_dir, "--checks-dir")
    inventory = inventory_for(request.hosts)
    limit = _limit(request)
    files = {opt: _input_file(getattr(request, opt), f"--{opt}") for opt, _ in _copied(request)}
    reports_dir = request.reports_dir or Path("reports") / timestamp(now or datetime.now(timezone.utc))
    reports_dir = Path(validate.safe_path(str(reports_dir), "--reports-dir")).resolve()
    if reports_dir.exists() and not reports_dir.is_dir():
        raise BadRequest(f"--reports-dir {reports_dir} is not a folder", hint="give a folder (made if missing)")
    if request.history is not None:
        with connect(request.history):  # made (or found readable) before any host is touched
            pass
    hosts = inventory.targets(limit)
    check_multi_node(request, hosts)
    multi_node = multi_node_variables(request, inventory, hosts)
    rendered = {
        VARS_FILE: render_variables(request, reports_dir=reports_dir, files=files, multi_node=multi_node),
        INVENTORY_FILE: render_inventory(inventory),
    }
    password = become_password(request.hosts, prompt)
    return FleetPlan(request, inventory, rendered, reports_dir, limit, request.history, password)


def _input_file(value: Path | None, what: str) -> Path:
    assert value is not None
    return validate.existing_file(validate.safe_path(str(value), what), what).resolve()


def _limit(request: FleetVerifyRequest) -> str | None:
    if request.retry_failed is None:
        return request.hosts.limit
    if request.hosts.limit is not None:
        raise BadRequest("--retry-failed and --limit exclude each other", hint="use one")
    folder = validate.existing_dir(validate.safe_path(str(request.retry_failed), "--retry-failed"), "--retry-failed")
    summary = folder / SUMMARY_FILE
    if not summary.is_file():
        raise BadRequest(f"--retry-failed: no {SUMMARY_FILE} in {folder}", hint=_RETRY_HINT)
    hosts = failed_hosts(read_text(summary, "fleet verify summary"), str(summary))
    return check_limit(",".join(hosts)) if hosts else ""


def run(plan: FleetPlan, *, on_progress: Callable[[Progress], None]) -> FleetVerifyResult:
    """Run the play on every host, then judge each one, write the summary and record the history."""
    if plan.limit == "":
        return FleetVerifyResult((), plan.reports_dir, "nothing to retry", plan.history)
    plan.reports_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    status, summaries = _run_play(plan, on_progress)
    outcomes, reads = _judge(plan, summaries, run_status=status, since=started)
    summary = FleetVerifyResult(outcomes, plan.reports_dir, status, plan.history)
    write_atomic(plan.reports_dir / SUMMARY_FILE, json.dumps(summary.to_dict(), indent=2) + "\n")
    notes = _record(plan.history, reads)
    return replace(summary, history_notes=notes, fleet=fleet_report_of(outcomes, reads, plan.history))


def _run_play(plan: FleetPlan, on_progress: Callable[[Progress], None]) -> tuple[str, dict[str, HostSummary]]:
    keep = plan.request.artifacts_dir
    work = Path(tempfile.mkdtemp(prefix="gpuenv-fleet-")) if keep is None else _artifacts(keep)
    try:
        lay_playbooks(work / "project", plan.files)
        outcome = run_playbook(
            runner_arguments(_run_request(plan, work)), become_password=plan.password, on_progress=on_progress
        )
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if outcome.interrupted is not None:
        raise Interrupted(
            f"interrupted by {outcome.interrupted}: Ansible was stopped; reports so far are in {plan.reports_dir}",
            hint="run gpuenv fleet verify again (--limit to the hosts still to do)",
        )
    return outcome.status, outcome.tally.hosts


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
        forks=plan.request.hosts.forks,
        limit=plan.limit,
        ask_become_pass=plan.password is not None,
        timeout_s=plan.request.timeout_s,
        path=controller_path(),
    )


def _judge(
    plan: FleetPlan, summaries: dict[str, HostSummary], *, run_status: str, since: float
) -> tuple[tuple[HostOutcome, ...], dict[str, ReportFile | Skipped]]:
    """Each targeted host's outcome, and what was read of the reports that came back (each read once)."""
    targeted = [*summaries, *(n for n in plan.targets if n not in summaries)]
    outcomes, reads = [], {}
    for host in targeted:
        path = plan.reports_dir / f"{host}.json"
        fresh = path.is_file() and path.stat().st_mtime >= since - 1
        if fresh:
            reads[host] = reportfile.read(path)
        verdict = reportfile.verdict(reads[host]) if fresh else None
        outcome, message = host_outcome(summaries.get(host), verdict, run_status=run_status)
        outcomes.append(HostOutcome(host, outcome, str(path) if fresh else None, message))
    return tuple(outcomes), reads


def _record(history_file: Path | None, reads: dict[str, ReportFile | Skipped]) -> tuple[str, ...]:
    if history_file is None:
        return ()
    try:
        _, skipped = ingest_read(history_file, [(found, host) for host, found in reads.items()])
    except (GpuenvError, sqlite3.Error) as exc:  # the hosts' outcomes stand; only the record is missing
        return (f"{history_file}: {getattr(exc, 'message', exc)}",)
    return tuple(skipped)


def fleet_report_of(
    outcomes: tuple[HostOutcome, ...], reads: dict[str, ReportFile | Skipped], history_file: Path | None
) -> FleetReport:
    """The fleet report over a run's reports, each host by its inventory name and outcome (a host
    without a report counts with its outcome alone), with the history's events for its GPUs."""
    hosts, skipped = [], []
    for h in outcomes:
        entry = entry_of(reads[h.host]) if h.host in reads else None
        if isinstance(entry, Skipped):
            skipped.append(entry)
        if not isinstance(entry, HostReport):  # none came back, or it was not a report
            entry = HostReport(h.host, h.report or "", h.outcome, "", "-", 0, (), (), ())
        hosts.append(replace(entry, host=h.host, outcome=h.outcome))
    rule = stats.Rule()
    groups, outliers = compare(hosts, rule, stats.MIN_JUDGED)
    failures = tuple(failures_by_code(hosts))
    events = _events(history_file, [g.uuid for h in hosts for g in h.gpus if g.uuid])
    return FleetReport(
        tuple(hosts), tuple(skipped), tuple(groups), failures, tuple(outliers), rule, stats.MIN_JUDGED, 0, events
    )


def _events(history_file: Path | None, uuids: list[str]) -> tuple[dict[str, Any], ...]:
    if history_file is None:
        return ()
    try:
        return tuple(e.to_dict() for e in gpu_events(history_file, uuids))
    except (GpuenvError, sqlite3.Error):  # said once already, by the record that failed
        return ()


@dataclass
class FleetBoard:
    """Live progress: hosts done out of the total, failures so far (a host is done when it fails or ends)."""

    total: int
    done: dict[str, str] = field(default_factory=dict)  # host -> "ok" or what went wrong
    LAST_TASK = "Judge the host"

    def add(self, p: Progress) -> str | None:
        """Record one step; a line to show when it finished a host."""
        if p.host in self.done:
            return None
        if p.status in ("failed", "unreachable"):
            self.done[p.host] = "unreachable" if p.status == "unreachable" else f"failed at {p.task!r}"
        elif p.task == self.LAST_TASK and p.status in ("skipped", "ok"):
            self.done[p.host] = "ok"
        else:
            return None
        return f"[{len(self.done)}/{self.total} done, {self.failures} failing] {p.host}: {self.done[p.host]}"

    @property
    def failures(self) -> int:
        return sum(state != "ok" for state in self.done.values())
