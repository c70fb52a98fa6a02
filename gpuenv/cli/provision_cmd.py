"""`gpuenv provision`: install driver, container toolkit, PyTorch and gpuenv on hosts, then certify them."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from gpuenv import validate
from gpuenv.cli.output import console, emit_json
from gpuenv.cli.params import checked
from gpuenv.cli.resolve_cmd import stack_from_options, stack_options
from gpuenv.errors import BadRequest, Interrupted
from gpuenv.files import owned_entries, wheelhouse_files, write_manifest
from gpuenv.provision import INVENTORY_FILE, VARS_FILE, WHEEL_DIR
from gpuenv.provision.inventory import (
    Inventory,
    hosts_from_args,
    load_inventory,
    render_inventory,
    with_become,
    with_defaults,
)
from gpuenv.provision.runner import PLAN, SITE, HostSummary, Progress, RunRequest, check_limit, runner_arguments
from gpuenv.provision.variables import (
    DRIVER_SOURCES,
    KERNEL_MODULES,
    VERIFY_DEVICES,
    VERIFY_LEVELS,
    ProvisionOptions,
    kb_facts,
    render_variables,
)

SCHEMA = "gpuenv.provision/1"
REPORT_OUTCOMES = ("certified", "not certified", "could not run", "interrupted")

EPILOG = """\b
Examples:
  gpuenv provision gpu01 --user ubuntu --ask-become-pass --cuda 12.4
  gpuenv provision -i hosts.ini --stack stack.json --forks 20 --limit rack3
  gpuenv provision -i hosts.yml --dry-run            # Ansible check mode, with diffs
  gpuenv provision -i hosts.yml --plan --json        # only the driver decisions per host
  gpuenv provision gpu01 --render-only ./project     # a project for plain ansible-playbook
  gpuenv provision -i hosts.ini --stack stack.json --wheelhouse ./wheels   # air-gapped

Exit codes: 0 all hosts provisioned (and certified), 1 a host failed or was unreachable,
2 bad request, 3 Ansible missing or broken on this machine.
"""


@click.command(epilog=EPILOG)
@click.argument("hosts", nargs=-1, callback=lambda c, p, v: tuple(v))
@click.option(
    "-i",
    "--inventory",
    "inventory_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Ansible inventory, INI or YAML (instead of HOST arguments).",
)
@click.option(
    "--user", callback=checked(validate.user), help="SSH user for hosts the inventory leaves unset [default: root]."
)
@click.option("--port", callback=checked(validate.port), help="SSH port for hosts the inventory leaves unset.")
@click.option("--ssh-key", type=click.Path(dir_okay=False, path_type=Path), help="SSH private key file.")
@click.option(
    "--become-method",
    type=click.Choice(["sudo", "su"]),
    default="sudo",
    show_default=True,
    help="How a non-root user becomes root.",
)
@click.option(
    "--become-password-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="File holding the become password (never put it on the command line).",
)
@click.option("--ask-become-pass", "-K", is_flag=True, help="Prompt for the become password.")
@stack_options
@click.option(
    "--driver-branch",
    callback=checked(lambda v: validate.driver_branch(v, "--driver-branch")),
    help="Driver branch to install, e.g. 580 [default: the stack's].",
)
@click.option(
    "--driver-source",
    type=click.Choice(DRIVER_SOURCES),
    default="auto",
    show_default=True,
    help="The OS's own driver packages or NVIDIA's CUDA repository.",
)
@click.option(
    "--kernel-modules",
    type=click.Choice(KERNEL_MODULES),
    default="auto",
    show_default=True,
    help="Open or proprietary NVIDIA kernel modules.",
)
@click.option("--allow-secure-boot", is_flag=True, help="Install even with Secure Boot on (you sign the module).")
@click.option("--no-reboot", is_flag=True, help="Never reboot; verify fails until you reboot yourself.")
@click.option("--skip-driver", is_flag=True, help="Leave the NVIDIA driver alone.")
@click.option("--skip-verify", is_flag=True, help="Do not certify the hosts.")
@click.option("--with-container-toolkit", is_flag=True, help="Also install the NVIDIA Container Toolkit for Docker.")
@click.option(
    "--venv",
    default="/opt/gpuenv/venv",
    show_default=True,
    callback=checked(lambda v: validate.absolute_path(v, "--venv")),
    help="Venv on the hosts.",
)
@click.option(
    "--wheelhouse",
    type=click.Path(file_okay=False, path_type=Path),
    help="Install from this directory of wheels, copied to each host (air-gapped).",
)
@click.option(
    "--index-url",
    callback=checked(lambda v: validate.url(v, "--index-url")),
    help="A mirror of the stack's PyTorch wheel index.",
)
@click.option(
    "--gpuenv-wheel",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Install this gpuenv wheel on the hosts [default: a wheel of the gpuenv running here].",
)
@click.option("--torch-only", is_flag=True, help="Install torch and numpy only, not torchvision/torchaudio.")
@click.option("--verify-level", type=click.Choice(VERIFY_LEVELS), default="quick", show_default=True)
@click.option(
    "--verify-device",
    type=click.Choice(VERIFY_DEVICES),
    default="auto",
    show_default=True,
    help="Device gpuenv verify certifies on the hosts (cpu: hosts without GPUs).",
)
@click.option(
    "--reports-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("reports"),
    show_default=True,
    help="Where verify reports land, as HOST.json.",
)
@click.option(
    "--min-free-gb",
    type=click.IntRange(1, 10000),
    default=10,
    show_default=True,
    help="Free space preflight requires on the hosts' root filesystem.",
)
@click.option("--forks", type=click.IntRange(1, 200), default=10, show_default=True, help="Hosts provisioned at once.")
@click.option("--limit", callback=checked(check_limit), help="Only these hosts or groups (Ansible pattern).")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.IntRange(60, 86400),
    default=4 * 3600,
    show_default=True,
    help="Seconds the whole run may take.",
)
@click.option("--dry-run", "--check", "dry_run", is_flag=True, help="Ansible check mode with diffs: change nothing.")
@click.option("--plan", "plan_only", is_flag=True, help="Only work out the driver plan for each host; change nothing.")
@click.option(
    "--render-only",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the Ansible project to this directory and run nothing.",
)
@click.option(
    "--artifacts-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep ansible-runner's working directory (events, output) here.",
)
@click.option("--json", "as_json", is_flag=True, help="The summary as JSON on stdout.")
@click.pass_context
def provision(ctx: click.Context, /, hosts: tuple[str, ...], inventory_file: Path | None, **opts: Any) -> int:
    """Install the NVIDIA driver, PyTorch and gpuenv on HOSTS, then certify them."""
    inventory = _inventory(hosts, inventory_file, opts)
    password = _become_password(opts)
    stack_keys = ("torch", "cuda", "driver", "python", "gpu", "os_name", "stack_file")
    stack = stack_from_options(ctx, **{k: opts.pop(k) for k in stack_keys})
    options = _options(opts)
    wheel = _gpuenv_wheel(opts["gpuenv_wheel"])
    files = _project_files(ctx, stack, options, inventory, wheel_name=wheel.name if wheel else None)
    if opts["render_only"] is not None:
        return _render_only(opts["render_only"], files, opts["as_json"], wheel=wheel)
    return _run(stack, inventory, files, opts, password=password, reports_dir=Path(options.reports_dir), wheel=wheel)


def _gpuenv_wheel(value: Path | None) -> Path | None:
    if value is None:
        return None
    path = validate.existing_file(validate.safe_path(str(value), "--gpuenv-wheel"), "--gpuenv-wheel")
    if not (path.name.startswith("gpuenv-") and path.name.endswith(".whl")):
        raise BadRequest(f"--gpuenv-wheel {path.name!r} is not a gpuenv wheel", hint="give a gpuenv-VERSION-*.whl file")
    return path.resolve()


def _inventory(hosts: tuple[str, ...], inventory_file: Path | None, opts: dict[str, Any]) -> Inventory:
    if hosts and inventory_file:
        raise BadRequest("give HOST arguments or -i INVENTORY, not both", hint="put every host in the inventory")
    if inventory_file is not None:
        inventory = load_inventory(validate.existing_file(str(inventory_file), "inventory"))
    else:
        inventory = hosts_from_args(hosts)
    key = opts["ssh_key"]
    if key is not None:
        key = str(validate.existing_file(validate.safe_path(str(key), "--ssh-key"), "--ssh-key").resolve())
    defaults = {
        "ansible_user": opts["user"] or "root",
        "ansible_port": opts["port"],
        "ansible_ssh_private_key_file": key,
    }
    return with_become(with_defaults(inventory, defaults), method=opts["become_method"])


def _become_password(opts: dict[str, Any]) -> str | None:
    path, ask = opts["become_password_file"], opts["ask_become_pass"]
    if path is not None and ask:
        raise BadRequest("--become-password-file and --ask-become-pass exclude each other", hint="use one")
    if ask:
        if not sys.stdin.isatty():
            raise BadRequest(
                "--ask-become-pass needs a terminal to prompt on", hint="use --become-password-file FILE instead"
            )
        return str(click.prompt("BECOME password", hide_input=True, err=True))
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


def _options(opts: dict[str, Any]) -> ProvisionOptions:
    wheelhouse = opts["wheelhouse"]
    if wheelhouse is not None:
        checked = validate.safe_path(str(wheelhouse), "--wheelhouse")
        wheelhouse = validate.existing_dir(checked, "--wheelhouse").resolve()
        if not any(w.suffix == ".whl" for w in wheelhouse_files(wheelhouse)):
            raise BadRequest(
                f"--wheelhouse {wheelhouse} holds no wheels",
                hint="fill it with: pip download -d DIR torch==VERSION ...",
            )
    reports = Path(validate.safe_path(str(opts["reports_dir"]), "--reports-dir")).resolve()
    return ProvisionOptions(
        venv=opts["venv"],
        wheelhouse=str(wheelhouse) if wheelhouse else None,
        index_url=opts["index_url"],
        torch_only=opts["torch_only"],
        driver=not opts["skip_driver"],
        driver_branch=opts["driver_branch"],
        driver_source=opts["driver_source"],
        kernel_modules=opts["kernel_modules"],
        allow_secure_boot=opts["allow_secure_boot"],
        reboot=not opts["no_reboot"],
        container_toolkit=opts["with_container_toolkit"],
        verify=not opts["skip_verify"],
        verify_level=opts["verify_level"],
        verify_device=opts["verify_device"],
        reports_dir=str(reports),
        min_free_gb=opts["min_free_gb"],
    )


def _project_files(
    ctx: click.Context, stack: Any, options: ProvisionOptions, inventory: Inventory, *, wheel_name: str | None
) -> dict[str, str]:
    from dataclasses import replace

    from gpuenv import __version__
    from gpuenv.compat import load_kb

    kb = load_kb(ctx.find_root().obj.data)
    options = replace(options, gpuenv_wheel=wheel_name or f"gpuenv-{__version__}-py3-none-any.whl")
    return {
        VARS_FILE: render_variables(stack, options, kb_facts(kb, stack)),
        INVENTORY_FILE: render_inventory(inventory),
    }


def _write_project(dest: Path, files: dict[str, str], *, wheel: Path | None) -> Path:
    """The static playbooks, the two rendered files, and gpuenv's own wheel under files/."""
    from gpuenv.resources import shipped_dir
    from gpuenv.selfwheel import build_own_wheel

    shutil.copytree(
        shipped_dir("playbooks"), dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True
    )
    for name, text in files.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_text(text, encoding="utf-8")
    if wheel is None:
        build_own_wheel(dest / WHEEL_DIR)
    else:
        (dest / WHEEL_DIR).mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, dest / WHEEL_DIR / wheel.name)
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


def _render_only(dest: Path, files: dict[str, str], as_json: bool, *, wheel: Path | None) -> int:
    validate.safe_path(str(dest), "--render-only")
    if dest.exists() and any(dest.iterdir()):
        raise BadRequest(f"--render-only {dest} is not empty", hint="give a new or empty directory")
    _write_project(dest, files, wheel=wheel)
    if as_json:
        emit_json({"schema": SCHEMA, "rendered": str(dest.resolve())})
    else:
        click.echo(
            f"wrote the Ansible project to {dest}; run it with:\n"
            f"  cd {shlex.quote(str(dest))} && ansible-playbook site.yml   # or plan_driver.yml for the driver plan"
        )
    return 0


def _run(
    stack: Any,
    inventory: Inventory,
    files: dict[str, str],
    opts: dict[str, Any],
    *,
    password: str | None,
    reports_dir: Path,
    wheel: Path | None,
) -> int:
    from gpuenv.adapters.ansible import run_playbook

    playbook = PLAN if opts["plan_only"] else SITE
    keep = opts["artifacts_dir"]
    if keep:
        work = Path(validate.safe_path(str(keep), "--artifacts-dir")).resolve()
        _claim_project(work / "project")
    else:
        work = Path(tempfile.mkdtemp(prefix="gpuenv-provision-"))
    outcome = None
    try:
        project = _write_project(work / "project", files, wheel=wheel)
        request = RunRequest(
            project_dir=project,
            private_data_dir=work,
            playbook=playbook,
            forks=opts["forks"],
            limit=opts["limit"],
            check=opts["dry_run"],
            ask_become_pass=password is not None,
            timeout_s=opts["timeout_s"],
            path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        )
        view = _ProgressView(enabled=not _quiet(), total=len(inventory.hosts))
        started = time.time()
        with view:
            outcome = run_playbook(runner_arguments(request), become_password=password, on_progress=view.update)
    finally:
        touched = outcome is not None and outcome.interrupted is not None and bool(outcome.tally.touched)
        if keep is None and not touched:
            shutil.rmtree(work, ignore_errors=True)
    assert outcome is not None  # run_playbook returned, or its exception went past the finally
    if outcome.interrupted is not None:
        raise _interrupted(outcome.interrupted, sorted(outcome.tally.touched), inventory, work)
    summaries = list(outcome.tally.hosts.values())
    if not summaries:
        raise BadRequest("no host matched", hint="check --limit against the inventory's host and group names")
    if playbook == SITE and not opts["dry_run"] and not opts["skip_verify"]:
        _attach_reports(summaries, reports_dir, since=started)
    _present(stack, summaries, outcome.tally.plans if opts["plan_only"] else None, opts, status=outcome.status)
    return 0 if all(s.succeeded for s in summaries) and outcome.status != "timeout" else 1


def _interrupted(signame: str, touched: list[str], inventory: Inventory, work: Path) -> Interrupted:
    if not touched:
        return Interrupted(f"interrupted by {signame}: Ansible was stopped before it touched any host")
    untouched = [h for h in inventory.names if h not in touched]
    message = f"interrupted by {signame}: Ansible was stopped; state unknown on {', '.join(touched)}"
    if untouched:
        message += f"; not started on {', '.join(untouched)}"
    return Interrupted(message, hint=f"the project and its events are kept in {work}; rerun provision to finish")


def _quiet() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().obj and ctx.find_root().obj.quiet)


def _attach_reports(summaries: list[HostSummary], reports_dir: Path, *, since: float) -> None:
    for s in summaries:
        path = reports_dir / f"{s.host}.json"
        if not path.is_file() or path.stat().st_mtime < since - 1:
            continue
        s.report = str(path)
        s.verdict = _report_outcome(path)


def _report_outcome(path: Path) -> str:
    """The verdict a host's report gives; a host's file is input like any other: capped, and checked."""
    from gpuenv.errors import GpuenvError
    from gpuenv.files import read_text
    from gpuenv.schema import parse_json

    try:
        data = parse_json(read_text(path, "host report"))
    except (GpuenvError, ValueError):
        return "unreadable report"
    verdict = data.get("verdict") if isinstance(data, dict) else None
    outcome = verdict.get("outcome") if isinstance(verdict, dict) else None
    return outcome if outcome in REPORT_OUTCOMES else "unreadable report"


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


def _present(
    stack: Any, summaries: list[HostSummary], plans: dict[str, Any] | None, opts: dict[str, Any], *, status: str
) -> None:
    rows = [_host_row(s) for s in summaries]
    if opts["as_json"]:
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "status": status,
            "check": opts["dry_run"],
            "stack": stack.to_dict(),
            "hosts": rows,
        }
        if plans is not None:
            doc["plans"] = plans
        emit_json(doc)
        return
    _print_table(rows, status)
    for host, plan in (plans or {}).items():
        click.echo(f"{host}: {plan.get('summary')}")


def _print_table(rows: list[dict[str, Any]], status: str) -> None:
    from rich.table import Table

    table = Table(title="gpuenv provision" + (f" ({status})" if status not in ("successful", "failed") else ""))
    for column in ("host", "status", "ok", "changed", "failed", "unreachable", "verify", "report"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            *(
                str(r[c]) if r[c] is not None else "-"
                for c in ("host", "status", "ok", "changed", "failed", "unreachable", "verify", "report")
            )
        )
    out = console()
    out.print(table)
    for r in rows:
        if r["message"]:
            out.print(f"{r['host']}: {r['status']}: {r['message']}")


class _ProgressView:
    """Live per-host progress on stderr: a table on a terminal, otherwise one line per change or failure."""

    def __init__(self, *, enabled: bool, total: int) -> None:
        self.enabled = enabled
        self.rows: dict[str, dict[str, Any]] = {}
        self.live: Any = None
        self.tty = enabled and sys.stderr.isatty()

    def __enter__(self) -> _ProgressView:
        if self.tty:
            from rich.live import Live

            self.live = Live(self._table(), console=console(stderr=True), refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def update(self, p: Progress) -> None:
        if not self.enabled:
            return
        row = self.rows.setdefault(p.host, {"task": "", "ok": 0, "changed": 0, "failed": 0, "state": "running"})
        row["task"] = p.task
        if p.status in ("ok", "changed", "failed"):
            row[p.status] += 1
        if p.status in ("failed", "unreachable"):
            row["state"] = p.status
        if self.live is not None:
            self.live.update(self._table())
        elif p.status in ("changed", "failed", "unreachable"):
            click.echo(f"{p.host}: {p.status}: {p.task}", err=True)

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(box=None)
        for column in ("host", "task", "ok", "changed", "failed", "state"):
            table.add_column(column)
        for host, r in self.rows.items():
            table.add_row(host, r["task"][:60], str(r["ok"]), str(r["changed"]), str(r["failed"]), r["state"])
        return table
