"""Rendering a ROCm stack: the same template, the same checks, no CUDA pieces.

The stacks are built by hand (tests/build_image/rocm.py) from the Stack's contract.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpuenv.adapters import docker_gpus
from gpuenv.errors import BadRequest
from gpuenv.image.plan import BuildRequest, plan_image
from gpuenv.kb import load_kb
from gpuenv.render.dockerfile import ImageOptions, RenderedImage, render_image
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from gpuenv.stack import Stack
from gpuenv.stack_service import StackRequest
from tests.build_image.rocm import DEVEL_BASE, INDEX, RUNTIME_BASE, mi300x_stack, rocm_stack, write_stack
from tests.build_image.test_render import GOLDEN, _check_golden

KB = load_kb()
# Everything of NVIDIA's a ROCm image must not carry.
CUDA_PIECES = ("CUDA_HOME", "TORCH_CUDA_ARCH_LIST", "NVIDIA", "nvidia", "cudnn", "cuDNN", "/usr/local/cuda", "nvcc")

ROCM_FAMILIES: dict[str, tuple[Stack, ImageOptions]] = {
    "rocm6.4-runtime-ubuntu24.04": (rocm_stack(), ImageOptions(with_packages=("torchvision", "torchaudio"))),
    "rocm6.4-devel-mi300x-ubuntu24.04": (mi300x_stack(), ImageOptions(flavor="devel")),
}


def _render(stack: Stack, options: ImageOptions) -> RenderedImage:
    return render_image(stack, options, KB.os_by_name[stack.os])


@pytest.mark.parametrize("name", sorted(ROCM_FAMILIES))
def test_golden_rocm_dockerfile(name: str) -> None:
    stack, options = ROCM_FAMILIES[name]
    _check_golden(GOLDEN / f"{name}.Dockerfile", _render(stack, options).files["Dockerfile"])


@pytest.mark.parametrize(
    "options",
    [ImageOptions(), ImageOptions(flavor="devel"), ImageOptions(slim=True), ImageOptions(wheelhouse=True, app=True)],
    ids=["runtime", "devel", "slim", "airgapped-app"],
)
def test_a_rocm_image_has_no_cuda_pieces(options: ImageOptions) -> None:
    rendered = _render(rocm_stack(), options)
    text = rendered.files["Dockerfile"]
    for piece in CUDA_PIECES:
        assert piece not in text, piece
    # "cuda" survives only in the name of the label for torch's wheel build, which every image carries
    assert "cuda" not in text.lower()
    assert not any("cuda" in name for name in rendered.labels)
    assert "CUDA" not in " ".join(rendered.notes)


def test_runtime_builds_from_the_rocm_dev_image() -> None:
    rendered = _render(rocm_stack(), ImageOptions())
    assert rendered.base_image == RUNTIME_BASE and rendered.variant == "runtime"
    text = rendered.files["Dockerfile"]
    assert f"ARG BASE_IMAGE={RUNTIME_BASE}\n" in text
    assert "PYTORCH_ROCM_ARCH" not in text and "ROCM_HOME" not in text
    assert any("bundle ROCm's math libraries" in note for note in rendered.notes)


def test_devel_sets_the_rocm_arch_list_and_home() -> None:
    rendered = _render(mi300x_stack(), ImageOptions(flavor="devel"))
    text = rendered.files["Dockerfile"]
    assert rendered.base_image == DEVEL_BASE and rendered.variant == "devel"
    assert 'PYTORCH_ROCM_ARCH="gfx942"' in text
    assert "ROCM_HOME=/opt/rocm" in text and "ROCM_PATH=/opt/rocm" in text
    assert "PATH=/opt/venv/bin:/opt/rocm/bin:$PATH" in text and "ninja-build" in text
    wide = _render(rocm_stack(), ImageOptions(flavor="devel")).files["Dockerfile"]
    assert 'PYTORCH_ROCM_ARCH="gfx90a;gfx942"' in wide


def test_torch_and_companions_come_pinned_from_the_rocm_index_with_nothing_blocking_triton() -> None:
    rendered = _render(rocm_stack(), ImageOptions(with_packages=("torchvision", "torchaudio")))
    assert rendered.files["requirements.txt"] == "torch==2.9.1\ntorchvision==0.24.1\ntorchaudio==2.9.1\nnumpy<3\n"
    text = rendered.files["Dockerfile"]
    torch_line = next(line for line in text.splitlines() if "/tmp/gpuenv/requirements.txt" in line)
    assert torch_line == f"RUN pip install --no-cache-dir --index-url {INDEX} -r /tmp/gpuenv/requirements.txt"
    # pytorch-triton-rocm is a dependency of the ROCm torch wheel: pip must be free to take it from that index
    for name in ("requirements.txt", "constraints.txt", "extra-requirements.txt"):
        assert "triton" not in rendered.files[name]
    assert "--no-deps" not in torch_line and "--only-binary" not in text


def test_labels_name_the_rocm_release_and_the_gpu() -> None:
    labels = _render(mi300x_stack(), ImageOptions(flavor="devel")).labels
    assert labels["io.gpuenv.rocm"] == "6.4" and labels["io.gpuenv.build"] == "rocm6.4"
    assert labels["io.gpuenv.gpu-gfx"] == "gfx942" and labels["io.gpuenv.arch-list"] == "gfx942"
    assert labels["io.gpuenv.driver-branch"] == "amdgpu-6.4"
    assert labels["org.opencontainers.image.title"] == "PyTorch 2.9.1 (rocm6.4) on ROCm 6.4, Python 3.12, ubuntu24.04"
    assert not {"io.gpuenv.cuda", "io.gpuenv.cudnn", "io.gpuenv.driver-min", "io.gpuenv.gpu-sm"} & set(labels)


def test_certification_tells_the_platform_from_the_labels_rendered() -> None:
    """The Docker adapter reads these labels to hand a ROCm image AMD's devices: the two stay in step."""
    assert docker_gpus.platform_of(_render(rocm_stack(), ImageOptions()).labels) == "rocm"
    cuda = render_image(
        resolve(KB, Request(cuda="12.8", os="ubuntu24.04")), ImageOptions(), KB.os_by_name["ubuntu24.04"]
    )
    assert docker_gpus.platform_of(cuda.labels) == "cuda"


def test_cudnn_on_a_rocm_stack_is_a_bad_request_with_a_hint() -> None:
    with pytest.raises(BadRequest, match="cuDNN") as refused:
        _render(rocm_stack(), ImageOptions(cudnn=True))
    assert "--flavor runtime or devel" in (refused.value.hint or "")


def test_a_rocm_stack_without_a_devel_image_asks_for_a_base() -> None:
    stack = replace(rocm_stack(), base_images={"runtime": RUNTIME_BASE})
    with pytest.raises(BadRequest, match="names no devel image"):
        _render(stack, ImageOptions(flavor="devel"))
    assert _render(stack, ImageOptions(flavor="devel", base_image="mirror.local/rocm/dev:6.4")).variant == "devel"


@pytest.mark.parametrize(
    "field,value",
    [
        ("arch_list", "sm_90"),
        ("arch_list", "gfx942\nRUN id"),
        ("build", "rocm6.2"),
        ("cudnn", "9.1.0"),
        ("driver_branch", "amdgpu-6.2"),
        ("driver_branch", "R580"),
    ],
)
def test_every_rocm_stack_value_is_validated_before_the_template(field: str, value: str) -> None:
    with pytest.raises(BadRequest):
        _render(replace(rocm_stack(), **{field: value}), ImageOptions())


def test_a_rocm_wheelhouse_must_hold_pytorch_triton_rocm(tmp_path: Path) -> None:
    stack_file = write_stack(rocm_stack(), tmp_path / "stack.json")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in (
        "torch-2.9.1+rocm6.4-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torchvision-0.24.1+rocm6.4-cp312-cp312-manylinux_2_28_x86_64.whl",
        *(f"{n}-1.0-py3-none-any.whl" for n in ("click", "jinja2", "msgspec", "packaging", "rich", "nvidia_ml_py")),
    ):
        (wheels / name).write_bytes(b"")
    request = BuildRequest(stack=StackRequest(stack_file=stack_file), wheelhouse=wheels)
    with pytest.raises(BadRequest, match="pytorch-triton-rocm"):
        plan_image(request, kb_path=None)
    (wheels / "pytorch_triton_rocm-3.5.1-cp312-cp312-linux_x86_64.whl").write_bytes(b"")
    plan = plan_image(request, kb_path=None)
    assert plan.stack == rocm_stack() and plan.tags == ("gpuenv/pytorch:2.9.1-rocm6.4-py3.12-ubuntu24.04-runtime",)


def test_a_rocm_stack_file_renders_exactly(tmp_path: Path) -> None:
    stack_file = write_stack(mi300x_stack(), tmp_path / "stack.json")
    plan = plan_image(BuildRequest(stack=StackRequest(stack_file=stack_file), flavor="devel"), kb_path=None)
    rendered = render_image(plan.stack, plan.options, plan.os_info)
    assert json.loads(rendered.files["stack.json"]) == mi300x_stack().to_dict()
    assert rendered.files["Dockerfile"] == (GOLDEN / "rocm6.4-devel-mi300x-ubuntu24.04.Dockerfile").read_text()
