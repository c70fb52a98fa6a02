"""build-image for aarch64 (GH200, GB200, Arm servers): a Dockerfile whose base NVIDIA publishes for arm64,
hadolint-clean with no x86-only piece, labelled with the architecture, built by the Docker SDK for linux/arm64.

No arm64 base can be pulled here, so the SDK's platform argument is proven with a real engine on an image
that needs no base and runs nothing (FROM scratch): the engine records the architecture it built for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuenv.adapters import docker as adapter
from gpuenv.image.plan import BuildRequest, plan_image
from gpuenv.kb import load_kb
from gpuenv.platforms.cuda.resolve import base_images
from gpuenv.render.dockerfile import render_image
from gpuenv.render.options import ImageOptions
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from gpuenv.stack_service import StackRequest
from tests.build_image.services import Service
from tests.build_image.test_hadolint import lint_dockerfiles
from tests.conftest import run_gpuenv

KB = load_kb()
ARM = KB.for_cpu_arch("aarch64")
FLAVOURS = {
    "runtime": ImageOptions(),
    "devel": ImageOptions(flavor="devel"),
    "runtime-cudnn": ImageOptions(cudnn=True),
    "devel-cudnn": ImageOptions(flavor="devel", cudnn=True),
}
X86_ONLY = ("x86_64", "amd64", "/x86", "linux/amd64")


def _aarch64_dockerfiles(tmp_path: Path) -> list[Path]:
    written = []
    for gpu, os_name in (("GH200", "ubuntu22.04"), ("GB200", "ubuntu24.04"), ("GH200", "rockylinux9")):
        stack = resolve(KB, Request(gpu=gpu, os=os_name, purpose="image"))
        assert stack.cpu_arch == "aarch64"
        for flavour, options in FLAVOURS.items():
            rendered = render_image(stack, options, KB.os_by_name[os_name])
            text = rendered.files["Dockerfile"]
            assert rendered.labels["io.gpuenv.cpu-arch"] == "aarch64"
            assert not [piece for piece in X86_ONLY if piece in text], f"{gpu}/{os_name}/{flavour}"
            path = tmp_path / f"{gpu}-{os_name}-{flavour}.Dockerfile"
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def test_the_aarch64_dockerfiles_are_hadolint_clean_and_free_of_x86_pieces(tmp_path: Path) -> None:
    lint_dockerfiles(_aarch64_dockerfiles(tmp_path))


def test_the_base_images_are_those_nvidia_publishes_for_arm64() -> None:
    assert ARM is not None
    for gpu, os_name in (("GH200", "ubuntu22.04"), ("GB200", "rockylinux9")):
        stack = resolve(KB, Request(gpu=gpu, os=os_name, purpose="image"))
        cuda = next(c for c in ARM.cuda if c.build == stack.build)
        assert os_name in cuda.images and stack.base_images["runtime"].endswith(f"-runtime-{os_name}")


def test_a_cudnn_image_missing_for_arm64_is_left_out() -> None:
    assert ARM is not None
    rocky9 = KB.os_by_name["rockylinux9"]
    arm, x86 = (next(c for c in kb.cuda if c.version == "12.2") for kb in (ARM, KB))
    assert "runtime" in base_images(arm, rocky9) and "cudnn-runtime" not in base_images(arm, rocky9)  # amd64 only
    assert "cudnn-runtime" in base_images(x86, rocky9)


def test_the_plan_builds_for_the_stacks_architecture() -> None:
    arm = plan_image(BuildRequest(stack=StackRequest(Request(gpu="GH200"))), kb_path=None)
    x86 = plan_image(BuildRequest(stack=StackRequest(Request(gpu="H100"))), kb_path=None)
    assert (arm.docker_platform, x86.docker_platform) == ("linux/arm64", "linux/amd64")
    assert arm.tags[0].endswith("-runtime-aarch64") and x86.tags[0].endswith("-runtime")


def test_render_only_prints_the_platform_in_the_docker_build_line(tmp_path: Path) -> None:
    done = run_gpuenv("build-image", "--gpu", "GB200", "--render-only", str(tmp_path / "ctx"))
    assert done.returncode == 0, done.stderr
    assert "--platform linux/arm64" in done.stdout and "-aarch64 " in done.stdout
    assert 'io.gpuenv.cpu-arch="aarch64"' in (tmp_path / "ctx" / "Dockerfile").read_text()


@pytest.mark.docker
def test_the_sdk_builds_for_the_platform_it_is_given(dockerd: Service, docker_client: Any, tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY stack.json /stack.json\n", encoding="utf-8")
    (tmp_path / "stack.json").write_text("{}\n", encoding="utf-8")
    result = adapter.build(docker_client, tmp_path, tag="gpuenv-test/arm64:1", platform="linux/arm64")
    try:
        assert docker_client.images.get(result.image_id).attrs["Architecture"] == "arm64"
    finally:
        docker_client.images.remove(result.image_id, force=True)
