"""The one place gpuenv runs Ansible: ansible-runner, imported only here, with an event handler.

Ansible missing or broken on the controller is CannotRun (exit 3); hosts that fail or cannot be
reached are results, reported per host. The become password goes to ansible-runner's expect
map only: never into argv, files, events or logs.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuenv.errors import CannotRun
from gpuenv.provision.runner import BECOME_PROMPT, HostTally, Progress, progress_from_event

_INSTALL_HINT = "install it on this machine: pip install 'gpuenv[ansible]'"


@dataclass
class RunOutcome:
    status: str  # ansible-runner's: successful | failed | timeout | canceled
    rc: int
    tally: HostTally
    artifact_dir: Path


def run_playbook(
    args: dict[str, Any],
    *,
    become_password: str | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> RunOutcome:
    """Run a playbook with ansible-runner; `args` comes from provision.runner.runner_arguments."""
    try:
        import ansible_runner
    except ImportError as exc:
        raise CannotRun(f"ansible-runner is not installed ({exc})", hint=_INSTALL_HINT) from exc
    if shutil.which("ansible-playbook", path=args["envvars"]["PATH"]) is None:
        raise CannotRun("ansible-playbook is not on PATH", hint=_INSTALL_HINT)
    tally = HostTally()

    def handle(event: dict[str, Any]) -> bool:
        tally.add(event)
        progress = progress_from_event(event)
        if progress is not None and on_progress is not None:
            on_progress(progress)
        return True

    extra: dict[str, Any] = {"event_handler": handle}
    if become_password is not None:
        extra["passwords"] = {BECOME_PROMPT: become_password}
    try:
        runner = ansible_runner.run(**args, **extra)
    except Exception as exc:  # ansible-runner's own errors: the controller's tooling is broken
        raise CannotRun(f"ansible-runner failed: {type(exc).__name__}: {exc}", hint=_INSTALL_HINT) from exc
    if not tally.stats_seen and runner.status != "timeout":
        raise CannotRun(
            f"ansible-playbook stopped before running on any host (rc {runner.rc}): {_tail(runner)}",
            hint="rerun with -vv; check that ansible-core works: ansible-playbook --version",
        )
    return RunOutcome(str(runner.status), int(runner.rc or 0), tally, Path(runner.config.artifact_dir))


def _tail(runner: Any, lines: int = 6) -> str:
    try:
        text = runner.stdout.read()
    except (OSError, AttributeError):
        return "(no output)"
    kept = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(kept) or "(no output)"
