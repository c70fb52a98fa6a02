"""What ansible-runner is asked to do: pure functions, no I/O.

`runner_arguments` builds the keyword arguments of `ansible_runner.run` (tested as a plain dict);
the adapter adds the become password, which is never part of them: it answers BECOME_PROMPT
through ansible-runner's expect map.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuenv.ansible.project import INVENTORY_FILE, SITE
from gpuenv.errors import BadRequest
from gpuenv.verify.reportfile import REPORT_LIMIT

BECOME_PROMPT = r"^BECOME password.*:\s*?$"
RESULT_LIMIT = 2 * REPORT_LIMIT  # a task result holding a report at gpuenv's cap for one, and its stdout_lines
_LIMIT = re.compile(r"[A-Za-z0-9_.:,!&*-]{1,200}", re.ASCII)


@dataclass(frozen=True)
class RunRequest:
    project_dir: Path
    private_data_dir: Path
    playbook: str = SITE
    forks: int = 10
    limit: str | None = None
    check: bool = False
    ask_become_pass: bool = False
    verbosity: int = 0
    timeout_s: int = 4 * 3600
    path: str = ""  # PATH for ansible-playbook (the controller's venv bin first)


def controller_path() -> str:
    """PATH for Ansible's own programs: the running Python's bin folder (gpuenv's venv) first."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def check_limit(value: str) -> str:
    if not _LIMIT.fullmatch(value) or value.startswith("-"):  # "-vvv" would be read as an option
        raise BadRequest(
            f"invalid --limit {value[:60]!r}", hint="host or group names separated by commas, e.g. gpu01,gpu02"
        )
    return value


def runner_arguments(req: RunRequest) -> dict[str, Any]:
    """Keyword arguments for ansible_runner.run."""
    cmdline = []
    if req.check:
        cmdline += ["--check", "--diff"]
    if req.ask_become_pass:
        cmdline.append("--ask-become-pass")
    args: dict[str, Any] = {
        "private_data_dir": str(req.private_data_dir),
        "project_dir": str(req.project_dir),
        "playbook": req.playbook,
        "inventory": str(req.project_dir / INVENTORY_FILE),
        "forks": req.forks,
        "envvars": {
            "PATH": req.path,
            "ANSIBLE_CONFIG": str(req.project_dir / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
            # ansible-runner's display empties a task result larger than this (700,000 characters by
            # default): a verify report comes back in one (fleet verify), as large as a report may be
            "MAX_EVENT_RES": str(RESULT_LIMIT),
        },
        "quiet": True,
        "suppress_env_files": True,  # nothing of the run, a password least of all, is written to env/
        "timeout": req.timeout_s,
    }
    if req.limit:
        args["limit"] = check_limit(req.limit)
    if cmdline:
        args["cmdline"] = " ".join(cmdline)
    if req.verbosity:
        args["verbosity"] = req.verbosity
    return args
