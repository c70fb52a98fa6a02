"""The "Add an OS" recipe of docs/knowledge-base.md, followed end to end on a copy of the knowledge base.

One row in `os` (and the OS named in the `images` of the CUDA rows that have images for it) is all
it takes: resolve offers it, build-image renders for it, provision's variables file carries it to
the roles, and the gathered host facts recognise it. Nothing else in gpuenv names an OS.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuenv.image.plan import BuildRequest, plan_image
from gpuenv.kb import load_kb
from gpuenv.provision.gathered import facts_from_gathered
from gpuenv.provision.variables import ProvisionOptions, kb_facts, render_variables, variables
from gpuenv.render.dockerfile import render_image
from gpuenv.resolve import Request
from gpuenv.resources import data_file
from gpuenv.stack_service import StackRequest
from tests.conftest import run_gpuenv

NEW_OS: dict[str, Any] = {  # step 1: the row, with its provenance
    "name": "rockylinux10",
    "family": "rhel",
    "version": "10",
    "package_manager": "dnf",
    "ansible": {"distribution": "Rocky", "os_family": "RedHat"},
    "codename": None,
    "build_tools_repo": "crb",
    "roles": ["image", "host"],
    "system_python": "3.12",
    "python": {
        "3.12": {
            "via": "system",
            "packages": ["python3.12", "python3.12-devel", "python3-pip"],
            "note": "Rocky Linux 10's own python3.12",
        }
    },
    "source": "distro-archives",
    "checked": "2026-11-29",
}
CUDA = "12.8"


def _knowledge_base_with_the_new_os(tmp_path: Path) -> Path:
    raw = json.loads(data_file("compat.json").read_text(encoding="utf-8"))
    raw["os"].append(NEW_OS)
    for row in raw["cuda"]:  # step 2: the CUDA releases with nvidia/cuda images for it
        if row["version"] == CUDA:
            row["images"].append(NEW_OS["name"])
    path = tmp_path / "compat.json"
    path.write_text(json.dumps(raw, indent=1), encoding="utf-8")
    return path


def test_a_new_os_row_reaches_resolve_the_image_provision_and_host_facts(tmp_path: Path) -> None:
    path = _knowledge_base_with_the_new_os(tmp_path)

    # resolve, as a user runs it with the file (GPUENV_DATA)
    out = run_gpuenv("resolve", "--os", "rockylinux10", "--cuda", CUDA, "--json", env={"GPUENV_DATA": str(path)})
    assert out.returncode == 0, out.stderr
    stack = json.loads(out.stdout)
    assert stack["os"] == "rockylinux10" and stack["python"] == "3.12" and stack["python_source"]["via"] == "system"
    assert stack["base_images"]["runtime"] == "nvidia/cuda:12.8.1-runtime-rockylinux10"

    # the image: build-image's plan finds the row, and the render installs through its package manager
    request = BuildRequest(stack=StackRequest(Request(os="rockylinux10", cuda=CUDA)), flavor="devel")
    plan = plan_image(request, kb_path=path)
    assert plan.os_info.name == "rockylinux10"
    dockerfile = render_image(plan.stack, plan.options, plan.os_info).files["Dockerfile"]
    assert "ARG BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-rockylinux10\n" in dockerfile
    assert "dnf config-manager --set-enabled crb" in dockerfile and "python3.12-devel" in dockerfile

    # provision: the variables file tells the roles the OS is supported and how to name it
    kb = load_kb(path)
    written = variables(plan.stack, ProvisionOptions(), kb_facts(kb, plan.stack))
    assert "10" in written["preflight_supported"]["rocky"]
    assert written["pytorch_os_names"]["Rocky 10"] == "rockylinux10"
    assert written["pytorch_python_by_os"]["rockylinux10"]["packages"][0] == "python3.12"
    assert '"Rocky 10": "rockylinux10"' in render_variables(plan.stack, ProvisionOptions(), kb_facts(kb, plan.stack))

    # a gathered host running it is recognised
    gathered = {"distribution": "Rocky", "distribution_version": "10.0", "architecture": "x86_64"}
    assert facts_from_gathered("node1", gathered, kb).os == "rockylinux10"
    assert facts_from_gathered("node1", gathered, load_kb()).os is None  # the shipped file does not know it
