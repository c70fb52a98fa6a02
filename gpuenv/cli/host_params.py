"""The options of the commands that work on hosts over Ansible (provision, fleet verify): the hosts,
the inventory, SSH and become. Apart from params, so that a command on this node (verify, info)
never loads the Ansible modules."""

from __future__ import annotations

import functools
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import click

from gpuenv import validate
from gpuenv.ansible.hosts import Hosts
from gpuenv.ansible.runner import check_limit
from gpuenv.cli.params import F, checked, choice
from gpuenv.errors import BadRequest

# The parameters host_options adds besides the HOSTS arguments: the other fields of ansible.hosts.Hosts.
HOST_KEYS = tuple(f.name for f in fields(Hosts) if f.name != "names")


def host_options(func: F) -> F:
    """Add the hosts, inventory, SSH and become options provision and fleet verify share.

    The become password is never an option: it comes from a private file or a prompt (become_prompt).
    """
    file = click.Path(dir_okay=False, path_type=Path)
    options = [
        click.argument("hosts", nargs=-1, callback=lambda c, p, v: tuple(v)),
        click.option(
            "-i", "--inventory", "inventory_file", type=file, help="Ansible inventory, INI or YAML (instead of HOSTS)."
        ),
        click.option(
            "--user",
            callback=checked(validate.user),
            help="SSH user for hosts the inventory leaves unset [default: root].",
        ),
        click.option("--port", callback=checked(validate.port), help="SSH port for hosts the inventory leaves unset."),
        click.option("--ssh-key", type=file, help="SSH private key file."),
        click.option("--become-method", **choice(["sudo", "su"], "sudo"), help="How a non-root user becomes root."),
        click.option(
            "--become-password-file",
            type=file,
            help="File holding the become password, mode 0600 (never put it on the command line).",
        ),
        click.option("--ask-become-pass", "-K", is_flag=True, help="Prompt for the become password."),
        click.option(
            "--forks", type=click.IntRange(1, 200), default=10, show_default=True, help="Hosts worked on at once."
        ),
        click.option("--limit", callback=checked(check_limit), help="Only these hosts or groups (Ansible pattern)."),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


def hosts_request(params: dict[str, Any]) -> Hosts:
    """Take the host options out of a command's parameters, as one value."""
    return Hosts(names=params.pop("hosts"), **{key: params.pop(key) for key in HOST_KEYS})


def become_prompt(text: str) -> str:
    """Ask for the become password on the terminal (hidden); without one, say how to give it instead."""
    if not sys.stdin.isatty():
        raise BadRequest(
            "--ask-become-pass needs a terminal to prompt on", hint="use --become-password-file FILE instead"
        )
    return str(click.prompt(text, hide_input=True, err=True))
