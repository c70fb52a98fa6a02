"""The hosts a command targets, with how to reach them and become root there: one value, shared by
provision and fleet verify (gpuenv.ansible.loader turns it into a validated inventory and the
become password)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Hosts:
    """HOST arguments or an inventory, and the SSH and become settings, as given (paths not yet checked)."""

    names: tuple[str, ...] = ()
    inventory_file: Path | None = None
    user: str | None = None
    port: int | None = None
    ssh_key: Path | None = None
    become_method: str = "sudo"
    become_password_file: Path | None = None
    ask_become_pass: bool = False
    forks: int = 10
    limit: str | None = None
