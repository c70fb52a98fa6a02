"""Rendering: golden Dockerfiles per stack family, the curated images/, and what every image must hold.

Golden files change only on purpose: GPUENV_UPDATE_GOLDEN=1 pytest tests/build_image rewrites them
(and images/NAME.Dockerfile); review the diff like code.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from gpuenv.errors import BadRequest
from gpuenv.image.plan import BuildRequest, plan_image
from gpuenv.kb import load_kb
from gpuenv.render import jinja_env
from gpuenv.render.dockerfile import DEADSNAKES_FINGERPRINT, ImageOptions, RenderedImage, render_image
from gpuenv.render.images import curated_specs
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from gpuenv.stack import Stack
from tests.conftest import REPO

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("GPUENV_UPDATE_GOLDEN") == "1"
KB = load_kb()


def render_spec(spec: Path) -> RenderedImage:
    """A curated spec through build-image's own planning, rendered (what images/NAME.Dockerfile holds)."""
    plan = plan_image(BuildRequest(spec=str(spec)), kb_path=None)
    return render_image(plan.stack, plan.options, plan.os_info)


# name -> (request, options): one per stack family (CUDA 11/12/13, runtime/devel, Ubuntu releases).
FAMILIES: dict[str, tuple[Request, ImageOptions]] = {
    "cu117-runtime-cudnn-ubuntu20.04": (
        Request(cuda="11.7", os="ubuntu20.04"),
        ImageOptions(cudnn=True, with_packages=("torchvision", "torchaudio")),
    ),
    "cu118-devel-a100-ubuntu22.04": (Request(cuda="11.8", gpu="A100", os="ubuntu22.04"), ImageOptions(flavor="devel")),
    "cu124-runtime-ubuntu22.04-airgapped-app": (
        Request(cuda="12.4", python="3.11", os="ubuntu22.04"),
        ImageOptions(wheelhouse=True, app=True, app_requirements=True, pip=("einops==0.8.1",)),
    ),
    "cu126-runtime-mirror-ubuntu24.04": (
        Request(torch="2.10.0", cuda="12.6", os="ubuntu24.04"),
        ImageOptions(index_url="https://mirror.example.com/whl/cu126", with_packages=("torchvision", "torchaudio")),
    ),
    "cu128-devel-h100-ubuntu24.04": (Request(cuda="12.8", gpu="H100", os="ubuntu24.04"), ImageOptions(flavor="devel")),
    "cu130-runtime-slim-ubuntu22.04": (
        Request(cuda="13.0", os="ubuntu22.04"),
        ImageOptions(slim=True, with_packages=()),
    ),
    "cu124-runtime-rockylinux9": (Request(cuda="12.4", os="rockylinux9"), ImageOptions()),
    "cu118-devel-rockylinux8": (Request(cuda="11.8", os="rockylinux8"), ImageOptions(flavor="devel")),
    # aarch64: a GH200's stack (its CPU is Grace), pinned so that the golden moves only with its own facts
    "cu128-devel-gh200-aarch64-ubuntu24.04": (
        Request(torch="2.9.1", cuda="12.8", gpu="GH200", os="ubuntu24.04"),
        ImageOptions(flavor="devel", cudnn=True),
    ),
}


def _check_golden(path: Path, text: str) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), f"{path} is missing: GPUENV_UPDATE_GOLDEN=1 pytest tests/build_image writes it"
    assert path.read_text(encoding="utf-8") == text, (
        f"{path.name} is out of date with the templates or the knowledge base; "
        "review, then GPUENV_UPDATE_GOLDEN=1 pytest tests/build_image"
    )


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_golden_dockerfile(name: str) -> None:
    request, options = FAMILIES[name]
    rendered = _render(resolve(KB, request), options)
    _check_golden(GOLDEN / f"{name}.Dockerfile", rendered.files["Dockerfile"])


@pytest.mark.parametrize("spec", curated_specs(), ids=lambda p: p.stem)
def test_curated_image_rendering_is_checked_in(spec: Path) -> None:
    rendered = render_spec(spec)
    _check_golden(spec.with_suffix(".Dockerfile"), rendered.files["Dockerfile"])


def test_curated_images_cover_cuda_11_12_13() -> None:
    majors = {render_spec(p).labels["io.gpuenv.cuda"].split(".")[0] for p in curated_specs()}
    assert majors >= {"11", "12", "13"}
    assert (REPO / "images" / "cu117-cudnn-ubuntu20.04.toml").is_file()


def _render(stack: Stack, options: ImageOptions) -> RenderedImage:
    """render_image with the knowledge base's row for the stack's OS, as build-image's plan passes it."""
    return render_image(stack, options, KB.os_by_name[stack.os])


def _stack(**request: str) -> Stack:
    return resolve(KB, Request(**request))


def _dockerfile(stack: Stack, **options: object) -> str:
    return _render(stack, ImageOptions(**options)).files["Dockerfile"]  # type: ignore[arg-type]


def test_seed_scenario_reaches_the_cudnn8_runtime_image() -> None:
    rendered = _render(_stack(cuda="11.7", os="ubuntu20.04"), ImageOptions(cudnn=True))
    assert rendered.base_image == "nvidia/cuda:11.7.1-cudnn8-runtime-ubuntu20.04"
    assert "ARG BASE_IMAGE=nvidia/cuda:11.7.1-cudnn8-runtime-ubuntu20.04\n" in rendered.files["Dockerfile"]


def test_runtime_default_is_the_plain_runtime_image_and_says_why() -> None:
    rendered = _render(_stack(cuda="12.4"), ImageOptions())
    assert rendered.base_image.endswith("-runtime-ubuntu22.04") and "cudnn" not in rendered.base_image
    assert any("bundle their own cuDNN" in note for note in rendered.notes)
    assert rendered.labels["io.gpuenv.cudnn"] == "bundled-with-torch"


def test_devel_flavour_has_nvcc_on_path_and_the_arch_list() -> None:
    stack = _stack(cuda="12.8", gpu="H100")
    rendered = _render(stack, ImageOptions(flavor="devel"))
    text = rendered.files["Dockerfile"]
    assert rendered.variant == "cudnn-devel" and "-cudnn-devel-" in rendered.base_image
    assert 'TORCH_CUDA_ARCH_LIST="9.0"' in text
    assert "PATH=/opt/venv/bin:/usr/local/cuda/bin:$PATH" in text and "CUDA_HOME=/usr/local/cuda" in text


def test_torch_and_companions_are_pinned_from_the_stack_index() -> None:
    stack = _stack(torch="2.4.1", cuda="12.1")
    rendered = _render(stack, ImageOptions(with_packages=("torchvision", "torchaudio")))
    pins = "torch==2.4.1\ntorchvision==0.19.1\ntorchaudio==2.4.1\n"
    assert rendered.files["requirements.txt"] == f"{pins}{stack.numpy}\n"
    assert rendered.files["constraints.txt"] == rendered.files["requirements.txt"]
    assert (
        "--index-url https://download.pytorch.org/whl/cu121 -r /tmp/gpuenv/requirements.txt"
        in rendered.files["Dockerfile"]
    )
    alone = _render(stack, ImageOptions(with_packages=()))
    assert alone.files["requirements.txt"] == f"torch==2.4.1\n{stack.numpy}\n"


def test_torchaudio_only_where_released() -> None:
    without = replace(_stack(torch="2.13.0"), torchaudio=None)  # as a stack file from an older knowledge base
    with pytest.raises(BadRequest, match=r"torchaudio has no release for torch 2\.13\.0"):
        _render(without, ImageOptions(with_packages=("torchaudio",)))


def test_wheelhouse_installs_with_no_index() -> None:
    text = _dockerfile(_stack(cuda="12.4"), wheelhouse=True)
    assert "COPY wheels/ /tmp/gpuenv/wheels/" in text
    assert text.count("--no-index --find-links /tmp/gpuenv/wheels") == 2
    assert "download.pytorch.org" not in text.split("FROM python-base AS final")[0].split("AS builder")[1]


def test_mirror_index_replaces_the_stack_index() -> None:
    text = _dockerfile(_stack(cuda="12.4"), index_url="https://mirror.example.com/whl/cu124")
    assert "--index-url https://mirror.example.com/whl/cu124 -r" in text


def test_torch_compile_needs_are_in_by_default_and_out_with_slim() -> None:
    stack = _stack(cuda="12.4", python="3.11")
    full, slim = _dockerfile(stack), _dockerfile(stack, slim=True)
    for package in ("gcc", "g++", "libc6-dev", "python3.11-dev"):
        assert f"      {package} \\\n" in full
        assert f"      {package} \\\n" not in slim
    assert "      python3.11 \\\n" in slim


def test_slim_devel_is_refused() -> None:
    with pytest.raises(BadRequest, match="devel flavour exists to compile"):
        _render(_stack(cuda="12.4"), ImageOptions(flavor="devel", slim=True))


def test_hygiene_non_root_no_pip_cache_no_curl_pipe_apt_lists_cleaned() -> None:
    for request, options in FAMILIES.values():
        text = _render(resolve(KB, request), options).files["Dockerfile"]
        assert text.rstrip().splitlines()[-2] == "USER 10001:10001"
        assert all("--no-cache-dir" in line for line in text.splitlines() if "pip install" in line)
        assert "curl" not in text and "| sh" not in text and "wget" not in text
        assert text.count("apt-get update") == text.count("rm -rf /var/lib/apt/lists/*")


def test_deadsnakes_key_is_pinned_and_scoped_with_signed_by() -> None:
    text = _dockerfile(_stack(cuda="11.7", os="ubuntu20.04"))
    assert f"--recv-keys {DEADSNAKES_FINGERPRINT}" in text
    assert f"grep -q '^fpr:*{DEADSNAKES_FINGERPRINT}:'" in text
    source = "https://ppa.launchpadcontent.net/deadsnakes/ppa/ubuntu focal main"
    assert f"[signed-by=/etc/apt/keyrings/deadsnakes.gpg] {source}" in text
    assert "deadsnakes" not in _dockerfile(_stack(cuda="12.4", os="ubuntu22.04", python="3.10"))


def test_labels_carry_the_whole_stack() -> None:
    stack = _stack(cuda="11.7", os="ubuntu20.04")
    rendered = _render(stack, ImageOptions(cudnn=True))
    labels = rendered.labels
    assert labels["io.gpuenv.torch"] == "2.0.1" and labels["io.gpuenv.cuda"] == "11.7.1"
    assert labels["io.gpuenv.cudnn"] == stack.cudnn and labels["io.gpuenv.python"] == "3.10"
    assert labels["io.gpuenv.driver-min"] == stack.driver_min
    assert labels["org.opencontainers.image.base.name"] == rendered.base_image
    for name, value in labels.items():
        assert f'{name}="{value}"' in rendered.files["Dockerfile"]
    assert json.loads(rendered.files["stack.json"]) == stack.to_dict()


def test_gpuenv_goes_in_without_touching_torch() -> None:
    text = _dockerfile(_stack(cuda="12.4"))
    assert "pip install --no-cache-dir --no-deps /tmp/gpuenv/gpuenv-wheel/gpuenv-*.whl" in text
    assert "-c /tmp/gpuenv/constraints.txt -r /tmp/gpuenv/extra-requirements.txt" in text
    builder = text.split("AS builder")[1]
    assert builder.index("requirements.txt") < builder.index("gpuenv-wheel")  # torch layer first


def test_app_comes_last_and_its_requirements_are_constrained() -> None:
    text = _dockerfile(_stack(cuda="12.4"), app=True, app_requirements=True)
    assert text.rstrip().splitlines()[-3] == "COPY --chown=app:app app/ /app/"
    assert "-c /tmp/gpuenv/constraints.txt -r /tmp/gpuenv/app-requirements.txt" in text


def test_rendering_is_deterministic() -> None:
    stack = _stack(cuda="12.6")
    first = _render(stack, ImageOptions(pip=("einops",)))
    assert _render(stack, ImageOptions(pip=("einops",))).files == first.files


@pytest.mark.parametrize(
    "field,value",
    [
        ("numpy", "numpy; curl evil|sh"),
        ("index_url", "https://x.example.com/whl\nRUN id"),
        ("arch_list", "9.0\nRUN id"),
        ("torch", "2.0.1 && id"),
        ("os", "ubuntu22.04\nRUN id"),
        ("base_images", {"runtime": "evil image"}),
    ],
)
def test_every_stack_value_is_validated_before_the_template(field: str, value: object) -> None:
    stack = replace(_stack(cuda="12.4"), **{field: value})
    with pytest.raises(BadRequest):
        render_image(stack, ImageOptions(), KB.os_by_name["ubuntu22.04"])


@pytest.mark.parametrize(
    "options",
    [
        ImageOptions(pip=("x; curl evil|sh",)),
        ImageOptions(base_image="a b"),
        ImageOptions(base_image="x\nRUN id"),
        ImageOptions(index_url="ftp://x"),
        ImageOptions(with_packages=("torchtext",)),
        ImageOptions(flavor="debug"),
    ],
)
def test_every_option_is_validated_before_the_template(options: ImageOptions) -> None:
    with pytest.raises(BadRequest):
        _render(_stack(cuda="12.4"), options)


def test_rocky_renders_through_dnf_with_appstream_python() -> None:
    rendered = _render(_stack(cuda="12.4", os="rockylinux9"), ImageOptions())
    text = rendered.files["Dockerfile"]
    assert rendered.base_image == "nvidia/cuda:12.4.1-runtime-rockylinux9"
    assert "apt-get" not in text and "DEBIAN_FRONTEND" not in text
    assert "dnf install -y --setopt=install_weak_deps=False --nodocs" in text and "dnf clean all" in text
    assert "python3.11-devel" in text and "RUN python3.11 -m venv /opt/venv" in text
    assert "useradd --uid 10001 --gid app" in text and "USER 10001:10001" in text
    assert 'io.gpuenv.os="rockylinux9"' in text and "-c /tmp/gpuenv/constraints.txt" in text
    slim = _render(_stack(cuda="12.4", os="rockylinux9"), ImageOptions(slim=True))
    assert "python3.11-devel" not in slim.files["Dockerfile"] and "gcc" not in slim.files["Dockerfile"]
    devel = _render(_stack(cuda="12.4", os="rockylinux9"), ImageOptions(flavor="devel"))
    assert "dnf config-manager --set-enabled crb" in devel.files["Dockerfile"]


def test_host_only_os_is_refused_with_a_reason() -> None:
    with pytest.raises(BadRequest, match="debian12 has no nvidia/cuda images"):
        _render(_stack(os="debian12"), ImageOptions())


def test_jinja_environment_is_strict(tmp_path: Path) -> None:
    import jinja2

    (tmp_path / "t.j2").write_text("value={{ missing }}\n", encoding="utf-8")
    env = jinja_env(tmp_path)
    with pytest.raises(jinja2.UndefinedError):
        env.get_template("t.j2").render({})
    (tmp_path / "u.j2").write_text("a={{ a }}\n", encoding="utf-8")
    assert env.get_template("u.j2").render({"a": 1}) == "a=1\n"
