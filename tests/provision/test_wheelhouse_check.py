"""The wheelhouse check on the control machine: pip's resolver names what a wheelhouse lacks.

That the full cached wheelhouse passes is proven by every provisioning run of the suite."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gpuenv.errors import BadRequest
from gpuenv.kb import load_kb
from gpuenv.provision.gathered import facts_from_gathered
from gpuenv.provision.perhost import plan_hosts, request_from, wheelhouse_torch
from gpuenv.provision.wheelhouse import check_wheelhouse
from gpuenv.resolve import Request


def _partial(wheelhouse: Path, dest: Path, *prefixes: str) -> Path:
    """A wheelhouse of some of the cached wheels (hard links where the file system allows)."""
    dest.mkdir()
    for wheel in wheelhouse.glob("*.whl"):
        if wheel.name.lower().startswith(prefixes):
            try:
                os.link(wheel, dest / wheel.name)
            except OSError:
                shutil.copy2(wheel, dest / wheel.name)
    return dest


def test_a_wheelhouse_of_torch_and_numpy_only_names_what_it_lacks(wheelhouse: Path, tmp_path: Path) -> None:
    partial = _partial(wheelhouse, tmp_path / "w", "torch-", "numpy-", "click-", "jinja2-", "markupsafe-")
    kb = load_kb()
    request, _ = request_from(
        Request(), wheels=wheelhouse_torch([p.name for p in partial.iterdir()]), skip_driver=False, pinned=None
    )
    facts = facts_from_gathered(
        "h1", {"distribution": "Debian", "distribution_version": "12", "architecture": "x86_64"}, kb
    )
    plans = tuple(plan_hosts(kb, request, [facts]))
    with pytest.raises(BadRequest) as caught:
        check_wheelhouse(partial, plans, torch_only=True)
    message = caught.value.message
    # torch's own dependencies (filelock, sympy…) and gpuenv's (packaging, rich, nvidia-ml-py)
    assert message.startswith(f"--wheelhouse {partial} lacks ") and "for Python 3.11 on x86_64" in message
    assert "packaging>=23" in message and "rich>=13" in message and "nvidia-ml-py>=12" in message
    assert "filelock" in message or "typing-extensions" in message or "sympy" in message, message
