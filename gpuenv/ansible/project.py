"""The Ansible project gpuenv runs: the shipped static playbooks, and the files gpuenv renders beside them."""

from __future__ import annotations

import shutil
from pathlib import Path

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
