"""Does a wheelhouse hold everything the hosts will install? pip's own resolver answers, on this machine.

`pip install --dry-run --no-index --find-links W --report` for each host's Python and platform,
with the stack's requirements and gpuenv's own dependencies: torch's dependencies included, as pip
would resolve them on the host. pip names one missing distribution per run, so the requirement it
names (or the one that needs it) is dropped and pip is asked again, a few times, to name the others.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from gpuenv.errors import BadRequest
from gpuenv.platforms.arch import ARCHES, DEFAULT_CPU_ARCH, cpu_arch
from gpuenv.provision.perhost import HostPlan
from gpuenv.provision.variables import requirements
from gpuenv.requirements import gpuenv_requirements

PIP_TIMEOUT_S = 300.0
MAX_ROUNDS = 6
_MISSING = re.compile(r"Could not find a version that satisfies the requirement (\S+)(?: \(from ([^)\s]+)\))?")


def pip_argv(wheelhouse: Path, target: Path, python: str, architecture: str, wanted: list[str]) -> list[str]:
    facts = cpu_arch(architecture) or ARCHES[DEFAULT_CPU_ARCH]  # what pip accepts for the host's wheels
    platforms = [arg for p in facts.wheel_platforms for arg in ("--platform", p)]
    return [
        sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--find-links", str(wheelhouse),
        "--quiet", "--isolated", "--ignore-installed", "--disable-pip-version-check",
        "--target", str(target), "--python-version", python, "--only-binary=:all:", *platforms, *wanted,
    ]  # fmt: skip


def check_wheelhouse(wheelhouse: Path, plans: tuple[HostPlan, ...], *, torch_only: bool) -> None:
    """BadRequest naming what the wheelhouse lacks for any accepted host; nothing when it holds it all."""
    asks = {
        (p.stack.python, p.facts.architecture, tuple(requirements(p.stack, torch_only=torch_only)))
        for p in plans
        if p.stack is not None
    }
    for python, architecture, wanted in sorted(asks):
        missing = missing_from(wheelhouse, python, architecture, [*wanted, *gpuenv_requirements()])
        if missing:
            raise BadRequest(
                f"--wheelhouse {wheelhouse} lacks {', '.join(missing)} for Python {python} on {architecture}",
                hint=f"add them: pip download -d {wheelhouse} --python-version {python} --only-binary=:all: "
                + " ".join(missing),
            )


def missing_from(wheelhouse: Path, python: str, architecture: str, wanted: list[str]) -> list[str]:
    """What pip cannot find in the wheelhouse for these requirements (empty: it holds everything)."""
    missing: list[str] = []
    remaining = list(wanted)
    with tempfile.TemporaryDirectory(prefix="gpuenv-wheelhouse-") as scratch:
        for _ in range(MAX_ROUNDS):
            named = _pip_names_missing(pip_argv(wheelhouse, Path(scratch) / "t", python, architecture, remaining))
            if named is None:
                break
            requirement, needed_by = named
            missing.append(f"{requirement} (needed by {needed_by})" if needed_by else requirement)
            drop = _name(needed_by or requirement)
            kept = [r for r in remaining if _name(r) != drop]
            if len(kept) == len(remaining) or not kept:
                break
            remaining = kept
    return missing


def _pip_names_missing(argv: list[str]) -> tuple[str, str | None] | None:
    """(the missing requirement, the requirement that needs it), or None when pip finds everything."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False, env=_pip_env())
    except subprocess.TimeoutExpired as exc:
        raise BadRequest(
            f"pip took over {PIP_TIMEOUT_S:.0f} s to check the wheelhouse", hint="check the wheelhouse's files"
        ) from exc
    if done.returncode == 0:
        return None
    found = _MISSING.search(done.stderr)
    if found:
        return found.group(1), found.group(2)
    lines = [line for line in done.stderr.splitlines() if line.startswith("ERROR:")] or [done.stderr.strip()[-300:]]
    raise BadRequest(f"pip cannot install from the wheelhouse: {lines[0]}", hint="check the wheelhouse's files")


def _pip_env() -> dict[str, str]:
    """No pip configuration of this machine (extra find-links, constraints) may change the answer."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")}, "PIP_CONFIG_FILE": os.devnull}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
