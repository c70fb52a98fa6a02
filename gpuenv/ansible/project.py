"""The Ansible project gpuenv runs: the shipped static playbooks, and the files gpuenv renders beside them."""

from __future__ import annotations

import functools
import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

from gpuenv.resources import shipped_dir

INVENTORY_FILE = "inventory/hosts.yml"  # gpuenv's own rendered inventory, in every project it runs
SITE = "site.yml"
PLAN = "plan_driver.yml"
GATHER = "gather.yml"


def lay_playbooks(dest: Path, files: dict[str, str]) -> None:
    """The shipped playbooks into dest, then the rendered files (name in the project -> text)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(shipped_dir("playbooks"), dest, ignore=ignore, dirs_exist_ok=True)
    write_files(dest, files)


def write_files(dest: Path, files: dict[str, str]) -> None:
    """Rendered files into a project (name in the project -> text), their folders made as needed."""
    for name, text in files.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_text(text, encoding="utf-8")


@functools.cache
def playbook_filter(name: str) -> ModuleType:
    """One of the playbooks' filter plugins (filter_plugins/NAME.py), loaded as a module: the decisions the
    roles make (the driver plans) are made by the same code when gpuenv shows the plan before running."""
    path = shipped_dir("playbooks") / "filter_plugins" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"gpuenv_playbook_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
