"""The variables file of the Ansible project: the stack and the options, as the roles name them.

Only this file and the inventory are rendered; the playbooks are static. Values are written as
JSON (which YAML reads the same), after a last check that none could be taken for a template. The
driver roles' variables (which driver, which branch or release) are the stack's platform's
(gpuenv.platforms: its host half); the rest are every stack's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpuenv.errors import BadRequest
from gpuenv.kb import KnowledgeBase, OsInfo
from gpuenv.platforms.registry import for_stack
from gpuenv.provision.options import ProvisionOptions
from gpuenv.requirements import gpuenv_requirements
from gpuenv.stack import Stack
from gpuenv.verify.options import SiteOptions

DRIVER_SOURCES = ("auto", "distro", "cuda-repo")
KERNEL_MODULES = ("auto", "open", "proprietary")
STACK_SUMMARY = ("torch", "torchvision", "platform", "cuda", "build", "python", "os", "driver_branch", "cpu_arch")


@dataclass(frozen=True)
class KbFacts:
    """What the roles need from the knowledge base for one stack: every stack's, then its platform's drivers'."""

    python_by_os: dict[str, dict[str, Any]]
    supported: dict[str, list[str]]  # host OS releases by Ansible distribution (lower case): versions
    os_names: dict[str, str]  # "Debian 12" (Ansible's distribution and version) -> "debian12"
    kb: KnowledgeBase  # for the driver roles' variables, which the stack's platform works out (gpuenv.platforms)


def host_oses(kb: KnowledgeBase) -> list[tuple[str, OsInfo]]:
    """The OSes gpuenv provisions, each with Ansible's name for its distribution ("Ubuntu", "Rocky")."""
    return [(o.ansible.distribution, o) for o in kb.os if "host" in o.roles and o.ansible is not None]


def kb_facts(kb: KnowledgeBase, stack: Stack) -> KbFacts:
    python_by_os = {
        o.name: {"via": p.via, "packages": list(p.packages)}
        for o in kb.os
        if "host" in o.roles and (p := o.python.get(stack.python)) is not None
    }
    hosts = host_oses(kb)
    supported: dict[str, list[str]] = {}
    for distribution, o in hosts:
        supported.setdefault(distribution.lower(), []).append(o.version)
    return KbFacts(
        python_by_os=python_by_os,
        supported=supported,
        os_names={f"{distribution} {o.version}": o.name for distribution, o in hosts},
        kb=kb,
    )


def requirements(stack: Stack, *, torch_only: bool) -> list[str]:
    """The stack's pinned pip requirements, without the index line."""
    lines = [r for r in stack.requirements() if not r.startswith("--")]
    if torch_only:
        lines = [r for r in lines if not r.startswith(("torchvision==", "torchaudio=="))]
    return lines


def variables(stack: Stack, options: ProvisionOptions, facts: KbFacts) -> dict[str, Any]:
    """Every stack's variables, with the driver roles' of its platform where the roles are named; BadRequest for an
    option the platform cannot honour (a driver branch too old for the stack's CUDA, a container toolkit on ROCm)."""
    return {
        "gpuenv_stack": {k: getattr(stack, k) for k in STACK_SUMMARY},
        "preflight_min_free_gb": options.min_free_gb,
        "preflight_supported": facts.supported,
        **for_stack(stack).host.variables(facts.kb, stack, options),
        "container_toolkit_enabled": options.container_toolkit,
        "pytorch_python": stack.python,
        "pytorch_python_by_os": facts.python_by_os,
        "pytorch_os_names": facts.os_names,
        "pytorch_venv": options.venv,
        "pytorch_requirements": requirements(stack, torch_only=options.torch_only),
        "pytorch_index_url": "" if options.wheelhouse else (options.index_url or stack.index_url),
        "pytorch_wheelhouse": options.wheelhouse or "",
        "pytorch_gpuenv_wheel": options.gpuenv_wheel or "",
        "pytorch_gpuenv_requirements": list(gpuenv_requirements()),
        "verify_enabled": options.verify,
        "verify_level": options.verify_level,
        "verify_device": options.verify_device,
        "verify_venv": options.venv,
        "verify_reports_dir": options.reports_dir,
        **site_variables(options),
    }


SITE_CHECKS_DEST = "/etc/gpuenv/checks.d"  # where a host keeps the site's checks directory


def site_variables(options: ProvisionOptions) -> dict[str, Any]:
    """The site checks role's variables, and the options that name them to verify on the host (none
    when no site check is shipped)."""
    if not (options.site_checks_files or options.site_checks_wheels):
        return {}
    site = SiteOptions(
        checks_dir=SITE_CHECKS_DEST if options.site_checks_files else None, all_plugins=bool(options.site_checks_wheels)
    )
    return {
        "site_checks_src": options.site_checks_dir or "",
        "site_checks_files": list(options.site_checks_files),
        "site_checks_dest": SITE_CHECKS_DEST,
        "site_checks_wheels": list(options.site_checks_wheels),
        "verify_site_args": site.arguments(),
    }


def _refuse_templates(value: Any, name: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_templates(item, f"{name}.{key}")
    elif isinstance(value, list):
        for item in value:
            _refuse_templates(item, name)
    elif isinstance(value, str) and any(mark in value for mark in ("{{", "{%", "{#")):
        raise BadRequest(f"{name} holds template markup: {value[:60]!r}", hint="remove the braces")


def _stack_comment(stack: Stack) -> str:
    software = for_stack(stack).resolver.software(stack)
    return f"# Stack: torch {stack.torch} ({stack.build}) on {software}, Python {stack.python}."


def render_variables(stack: Stack, options: ProvisionOptions, facts: KbFacts) -> str:
    values = variables(stack, options, facts)
    _refuse_templates(values, "variables")
    lines = [
        "# Written by gpuenv provision: the stack and options this project installs.",
        _stack_comment(stack),
        "---",
    ]
    lines += [f"{key}: {json.dumps(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"
