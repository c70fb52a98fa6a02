"""`gpuenv provision`: install driver, container toolkit, PyTorch and gpuenv on hosts, then certify them."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click

from gpuenv import validate
from gpuenv.ansible.events import Progress, ProgressBoard
from gpuenv.cli import settings
from gpuenv.cli.fleet_params import rollout_gate, rollout_options
from gpuenv.cli.host_params import become_prompt, host_options, hosts_request
from gpuenv.cli.output import console, emit_json, printable, table, warn
from gpuenv.cli.params import (
    choice,
    grammar,
    verify_option,
)
from gpuenv.cli.stack_params import stack_options, stack_request
from gpuenv.image.plan import os_line
from gpuenv.provision.apply import render_project, run_project
from gpuenv.provision.plan import SCHEMA, ProvisionRequest, on_host, one_stack, prepare_project
from gpuenv.provision.plantext import plan_lines, stack_label
from gpuenv.provision.variables import DRIVER_SOURCES, KERNEL_MODULES

EPILOG = """\b
Examples:
  gpuenv provision gpu01 --user ubuntu --ask-become-pass   # the stack from gpu01's own facts
  gpuenv provision -i hosts.ini --cuda 12.4 --forks 20 --limit rack3
  gpuenv provision -i hosts.ini --stack stack.json   # one stack; hosts it cannot serve are refused
  gpuenv provision -i hosts.yml --dry-run            # Ansible check mode, with diffs
  gpuenv provision -i hosts.yml --plan --json        # each host's facts, stack and driver plan
  gpuenv provision -i hosts.ini --stack s.json --fleet reports/   # warns of hosts that cannot run it
  gpuenv provision gpu01 --render-only ./project     # a project for plain ansible-playbook
  gpuenv provision -i hosts.ini --wheelhouse ./wheels   # air-gapped: torch from the wheelhouse

Exit codes: 0 all hosts provisioned (and certified), 1 a host failed, was unreachable or was
refused in the plan, 2 bad request, 3 Ansible missing or broken on this machine.
"""
DEFAULT = ProvisionRequest()  # the request's defaults are the options' defaults
FILE = click.Path(dir_okay=False, path_type=Path)
DIR = click.Path(file_okay=False, path_type=Path)
COLUMNS = ("host", "status", "stack", "ok", "changed", "failed", "unreachable", "verify", "report")
HELP = {
    "index_url": "A mirror of the stack's PyTorch wheel index.",
    "reports_dir": "Where verify reports land, as HOST.json.",
    "timeout": "Seconds the whole run may take.",
    "driver_branch": "Driver branch to install, e.g. 580 [default: the stack's].",
    "driver_source": "The OS's own driver packages or NVIDIA's CUDA repository.",
    "allow_secure_boot": "Install even with Secure Boot on (you sign the module).",
    "with_container_toolkit": "Also install the NVIDIA Container Toolkit for Docker.",
    "wheelhouse": "Install from this directory of wheels, copied to each host (air-gapped).",
    "gpuenv_wheel": "Install this gpuenv wheel on the hosts [default: a wheel of the gpuenv running here].",
    "torch_only": "Install torch and numpy only, not torchvision/torchaudio.",
    "site_checks_dir": "The site's own verify checks: this directory becomes /etc/gpuenv/checks.d on the hosts.",
    "site_checks_wheel": "A site checks package (entry points in gpuenv.checks) for the hosts' venv (repeatable).",
    "verify_device": "Device gpuenv verify certifies on the hosts (cpu: hosts without GPUs).",
    "min_free_gb": "Free space preflight requires on the hosts' root filesystem.",
    "plan_only": "Only gather each host's facts and show its stack and driver plan; change nothing.",
    "artifacts_dir": "Keep ansible-runner's working directory (events, output) here.",
}


@click.command(epilog=EPILOG)
@host_options
@stack_options
@click.option(
    "--driver-branch", callback=grammar(validate.driver_branch, "--driver-branch"), help=HELP["driver_branch"]
)
@click.option("--driver-source", **choice(DRIVER_SOURCES, DEFAULT.driver_source), help=HELP["driver_source"])
@click.option(
    "--kernel-modules",
    **choice(KERNEL_MODULES, DEFAULT.kernel_modules),
    help="Open or proprietary NVIDIA kernel modules.",
)
@click.option("--allow-secure-boot", is_flag=True, help=HELP["allow_secure_boot"])
@click.option("--no-reboot", is_flag=True, help="Never reboot; verify fails until you reboot yourself.")
@click.option("--skip-driver", is_flag=True, help="Leave the NVIDIA driver alone.")
@click.option("--skip-verify", is_flag=True, help="Do not certify the hosts.")
@click.option("--with-container-toolkit", is_flag=True, help=HELP["with_container_toolkit"])
@click.option(
    "--venv",
    default=DEFAULT.venv,
    show_default=True,
    callback=grammar(validate.absolute_path, "--venv"),
    help="Venv on the hosts.",
)
@click.option("--wheelhouse", type=DIR, help=HELP["wheelhouse"])
@click.option("--index-url", callback=grammar(validate.url, "--index-url"), help=HELP["index_url"])
@click.option("--gpuenv-wheel", type=FILE, help=HELP["gpuenv_wheel"])
@click.option("--torch-only", is_flag=True, help=HELP["torch_only"])
@click.option("--site-checks-dir", type=DIR, help=HELP["site_checks_dir"])
@click.option("--site-checks-wheel", type=FILE, multiple=True, help=HELP["site_checks_wheel"])
@verify_option("level", flag="--verify-level")
@verify_option("device", HELP["verify_device"], flag="--verify-device")
@click.option("--reports-dir", type=DIR, default=DEFAULT.reports_dir, show_default=True, help=HELP["reports_dir"])
@click.option(
    "--min-free-gb",
    type=click.IntRange(1, 10000),
    default=DEFAULT.min_free_gb,
    show_default=True,
    help=HELP["min_free_gb"],
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.IntRange(60, 86400),
    default=DEFAULT.timeout_s,
    show_default=True,
    help=HELP["timeout"],
)
@click.option("--dry-run", "--check", "dry_run", is_flag=True, help="Ansible check mode with diffs: change nothing.")
@click.option("--plan", "plan_only", is_flag=True, help=HELP["plan_only"])
@click.option("--render-only", type=DIR, help="Write the Ansible project to this directory and run nothing.")
@click.option("--artifacts-dir", type=DIR, help=HELP["artifacts_dir"])
@click.option("--json", "as_json", is_flag=True, help="The summary as JSON on stdout.")
@rollout_options
@click.pass_context
def provision(ctx: click.Context, /, as_json: bool, **params: Any) -> int:
    """Install the NVIDIA driver, PyTorch and gpuenv on HOSTS, then certify them."""
    fleet_check = rollout_gate(params, settings(ctx).data)
    request = ProvisionRequest(hosts=hosts_request(params), stack=stack_request(params), **params)
    project = prepare_project(request, kb_path=settings(ctx).data, prompt=become_prompt, on_warning=warn)
    fleet_check(lambda: project.stack or one_stack(project), on_host(project))  # before anything is rendered or run
    if request.render_only is not None:
        dest = render_project(project, request.render_only)
        if as_json:
            emit_json({"schema": SCHEMA, "rendered": str(dest)})
        else:
            if project.stack is not None:
                hosts = "--render-only reads no host's facts;"
                click.echo(printable(os_line(project.stack, request.stack, for_what=hosts)), err=True)
            click.echo(
                f"wrote the Ansible project to {request.render_only}; run it with:\n"
                f"  cd {shlex.quote(str(request.render_only))} && ansible-playbook site.yml"
                "   # or plan_driver.yml for the driver plan"
            )
        return 0
    show_plan = None if as_json or request.plan_only else _print_plan
    with ProgressView(enabled=not settings(ctx).quiet) as view:
        result = run_project(project, on_progress=view.update, on_plan=show_plan)
    if as_json:
        emit_json(result.to_dict())
    elif request.plan_only:
        _print_plan(result)
    else:
        _print_result(result)
    return result.exit_code


def _print_plan(result: Any) -> None:
    for line in plan_lines(result.rows(), result.notes):
        click.echo(line)


def _print_result(result: Any) -> None:
    status = result.status
    out = console()
    title = "gpuenv provision" + (f" ({status})" if status not in ("successful", "failed") else "")
    rows = [{**r, "stack": stack_label(r["stack"])} for r in result.rows()]
    out.print(table(COLUMNS, ([str(r[c]) if r[c] is not None else "-" for c in COLUMNS] for r in rows), title=title))
    for r in rows:
        if r["message"]:
            out.print(f"{r['host']}: {r['status']}: {r['message']}")


class ProgressView:
    """Live per-host progress on stderr: a table on a terminal, otherwise one line per change or failure."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled, self.board = enabled, ProgressBoard()
        self.live: Any = None

    def __enter__(self) -> ProgressView:
        if self.enabled and sys.stderr.isatty():
            from rich.live import Live  # start-up: rich is loaded only when something is drawn (cli.output)

            self.live = Live(self._table(), console=console(stderr=True), refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def update(self, p: Progress) -> None:
        if not self.enabled:
            return
        worth_a_line = self.board.add(p)
        if self.live is not None:
            self.live.update(self._table())
        elif worth_a_line:
            click.echo(f"{p.host}: {p.status}: {p.task}", err=True)

    def _table(self) -> Any:
        return table(ProgressBoard.COLUMNS, self.board.table_rows(), box=None)
