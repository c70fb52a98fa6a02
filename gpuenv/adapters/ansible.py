"""The one place gpuenv runs Ansible: ansible-runner, imported only here, with an event handler.

Ansible missing or broken on the controller is CannotRun (exit 3); hosts that fail or cannot be
reached are results, reported per host. The become password goes to ansible-runner's expect
map only: never into argv, files, events or logs.

Interrupting a run (SIGINT, SIGTERM) stops Ansible and everything it started: ansible-playbook
runs in its own session (pexpect's), and on a signal its group and every descendant get SIGTERM,
then SIGKILL after a grace period; the outcome says which signal and which hosts were touched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuenv import processes
from gpuenv.ansible.events import HostTally, Progress, progress_from_event
from gpuenv.ansible.runner import BECOME_PROMPT, controller_path
from gpuenv.errors import BadRequest, CannotRun
from gpuenv.extras import install_hint, needed

_INSTALL_HINT = f"install it on this machine: {install_hint('ansible')}"
STOP_GRACE_S = 5.0  # SIGTERM, then this long for Ansible to stop its workers and ssh, then SIGKILL
POLL_S = 0.5  # how often ansible-runner asks whether to cancel (its default is 5 s)


@dataclass
class RunOutcome:
    status: str  # ansible-runner's: successful | failed | timeout | canceled
    rc: int
    tally: HostTally
    artifact_dir: Path
    interrupted: str | None = None  # the signal that stopped the run


def run_playbook(
    args: dict[str, Any],
    *,
    become_password: str | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    keep_events: bool = True,
) -> RunOutcome:
    """Run a playbook with ansible-runner; `args` comes from gpuenv.ansible.runner.runner_arguments.

    keep_events=False: ansible-runner does not write each event into the artifacts again (a play
    whose results carry whole reports would copy every report there once more)."""
    with needed("ansible_runner", "running a playbook"):
        import ansible_runner  # heavy, and an optional extra (gpuenv[ansible])
    if shutil.which("ansible-playbook", path=args["envvars"]["PATH"]) is None:
        raise CannotRun("ansible-playbook is not on PATH", hint=_INSTALL_HINT)
    tally = HostTally()

    def handle(event: dict[str, Any]) -> bool:
        tally.add(event)
        progress = progress_from_event(event)
        if progress is not None and on_progress is not None:
            on_progress(progress)
        return keep_events

    with processes.Deferred() as signals:

        def cancel() -> bool:
            if signals.signal is None:
                return False
            processes.stop_children(grace_s=STOP_GRACE_S)  # ansible-runner itself would only SIGKILL the group
            return True

        extra: dict[str, Any] = {"event_handler": handle, "cancel_callback": cancel}
        if become_password is not None:
            extra["passwords"] = {BECOME_PROMPT: become_password}
        private = Path(args["private_data_dir"])
        _runner_settings(private)
        guarded = {
            **args,
            "binary": str(processes.guard_script(private, "ansible-playbook", last=(args["playbook"],))),
            "envvars": {**args["envvars"], processes.PARENT_ENV: str(os.getpid())},
        }
        try:
            runner = ansible_runner.run(**guarded, **extra)
        except Exception as exc:  # ansible-runner's own errors: the controller's tooling is broken
            raise CannotRun(f"ansible-runner failed: {type(exc).__name__}: {exc}", hint=_INSTALL_HINT) from exc
    if signals.signal is not None:
        return RunOutcome("interrupted", 254, tally, Path(runner.config.artifact_dir), signals.signal)
    if not tally.stats_seen and runner.status != "timeout":
        tail = _tail(runner)
        if "no hosts to target" in tail:
            raise BadRequest(
                "no host matched: the inventory and --limit leave Ansible nothing to run on",
                hint="check --limit against the inventory's host and group names",
            )
        raise CannotRun(
            f"ansible-playbook stopped before running on any host (rc {runner.rc}): {tail}",
            hint="rerun with -vv; check that ansible-core works: ansible-playbook --version",
        )
    return RunOutcome(str(runner.status), int(runner.rc or 0), tally, Path(runner.config.artifact_dir))


def _runner_settings(private_data_dir: Path) -> None:
    """ansible-runner reads its poll interval only from env/settings (a settings= argument is dropped)."""
    env = private_data_dir / "env"
    env.mkdir(parents=True, exist_ok=True)
    (env / "settings").write_text(json.dumps({"pexpect_timeout": POLL_S}) + "\n", encoding="utf-8")


def _tail(runner: Any, lines: int = 6) -> str:
    try:
        text = runner.stdout.read()
    except (OSError, AttributeError):
        return "(no output)"
    kept = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(kept) or "(no output)"


def list_inventory(path: Path, *, timeout_s: float) -> dict[str, Any]:
    """`ansible-inventory --list` over a user's inventory: Ansible's own reading of every format.

    Missing ansible-core is CannotRun (exit 3); an inventory Ansible cannot read, or one whose
    script does not answer in time, is a bad request (exit 2) with Ansible's own message.
    """
    search = controller_path()
    program = shutil.which("ansible-inventory", path=search)
    if program is None:
        raise CannotRun("ansible-inventory is not on PATH", hint=_INSTALL_HINT)
    env = {
        **os.environ,
        "PATH": search,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1",  # a file no plugin reads is an error, not an empty inventory
        "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "1",
    }
    hint = "check it with: ansible-inventory -i FILE --list"
    try:
        done = subprocess.run(
            [program, "-i", str(path), "--list"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired as exc:
        raise BadRequest(f"inventory {path} did not load within {timeout_s:.0f} s", hint=hint) from exc
    except OSError as exc:
        raise CannotRun(f"cannot run ansible-inventory: {exc}", hint=_INSTALL_HINT) from exc
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if "ERROR" in ln or "Unable to parse" in ln or "Failed to parse" in ln]
        reason = " ".join((errors or lines or ["(no message)"])[-2:])[:400]
        raise BadRequest(f"Ansible cannot read the inventory {path}: {reason}", hint=hint)
    try:
        data: dict[str, Any] = json.loads(done.stdout)
    except ValueError as exc:
        raise CannotRun(f"ansible-inventory printed no JSON: {exc}", hint=_INSTALL_HINT) from exc
    return data
