"""build-image against a real Docker engine and a real registry.

No registry on the internet is reachable, so the base image is a stand-in: the cached Debian
bookworm rootfs, imported. The rendered Dockerfile is built against it for a stack whose OS
packages exist on Debian too (Python 3.11), with torch 2.13.0 alone from the cached wheelhouse,
and the build's RUN steps use host networking so apt reaches Debian's archive.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gpuenv.errors import BadResult, CannotRun
from gpuenv.verify.launch import host_os
from tests.build_image import services
from tests.conftest import require, run_gpuenv

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TAG = "gpuenv-test/e2e:1"
BUILD_TIMEOUT = 1500


def _build_args(standin: str, wheelhouse: Path, app: Path, *extra: str) -> list[str]:
    return [
        "build-image",
        "--torch",
        "2.13.0",
        "--python",
        "3.11",
        "--os",
        "ubuntu22.04",
        "--with",
        "none",
        "--wheelhouse",
        str(wheelhouse),
        "--base-image",
        standin,
        "--network",
        "host",
        "--app",
        str(app),
        "--json",
        *extra,
    ]


def _build(env: dict[str, str], args: list[str]) -> dict[str, Any]:
    result = run_gpuenv(*args, env=env, timeout=BUILD_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    out: dict[str, Any] = json.loads(result.stdout)
    return out


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    app = tmp_path_factory.mktemp("app")
    (app / "main.py").write_text("print('app version 1')\n")
    (app / "requirements.txt").write_text("rich\n")  # from the wheelhouse, constrained like everything else
    return app


@pytest.fixture(scope="module")
def built(docker_env: dict[str, str], standin_image: str, wheelhouse: Path, app_dir: Path) -> dict[str, Any]:
    """The end-to-end image: built once, through the CLI, from the rendered Dockerfile."""
    extra = ["--tag", TAG, "--tag", "gpuenv-test/e2e:latest", "--verify"]
    return _build(docker_env, _build_args(standin_image, wheelhouse, app_dir, *extra))


def _run(docker_client: Any, image: str, command: list[str]) -> str:
    output: bytes = docker_client.containers.run(image, command, network_mode="none", remove=True)
    return output.decode()


def test_image_is_built_and_tagged(built: dict[str, Any], docker_client: Any) -> None:
    assert built["image_id"].startswith("sha256:") and built["size"] > 100_000_000
    image = docker_client.images.get(TAG)
    assert image.id == built["image_id"]
    assert set(built["tags"]) == {TAG, "gpuenv-test/e2e:latest"}
    assert "gpuenv-test/e2e:latest" in image.tags


def test_gpuenv_and_torch_work_inside_the_image(built: dict[str, Any], docker_client: Any) -> None:
    # `gpuenv verify --device cpu --level quick` ran inside the image through --verify.
    assert built["verify"]["exit_code"] == 0, built["verify"]
    report = built["verify"]["report"]
    assert report["image_run"]["gpus"] is False and report["device"] == "cpu"
    assert report["verdict"]["certified"] is True and report["level"] == "quick"
    assert any(check["status"] == "pass" for check in report["checks"]), report["checks"]
    out = _run(
        docker_client,
        TAG,
        ["python", "-c", "import torch, gpuenv, sys; print(torch.__version__, gpuenv.__version__, sys.executable)"],
    )
    torch_version, _, python = out.split()
    assert torch_version.startswith("2.13.0") and python == "/opt/venv/bin/python"
    assert _run(docker_client, TAG, ["id", "-u"]).strip() == "10001"
    assert _run(docker_client, TAG, ["python", "main.py"]).strip() == "app version 1"
    assert _run(docker_client, TAG, ["gpuenv", "--version"]).startswith("gpuenv, version")


def test_torch_compile_toolchain_is_in_the_image(built: dict[str, Any], docker_client: Any) -> None:
    probe = (
        "import sysconfig, shutil, os; print(shutil.which('gcc') is not None, "
        "os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"
    )
    assert _run(docker_client, TAG, ["python", "-c", probe]).split() == ["True", "True"]


def test_labels_carry_the_stack(built: dict[str, Any], docker_client: Any) -> None:
    labels = docker_client.images.get(TAG).labels
    stack = built["stack"]
    assert labels["io.gpuenv.torch"] == stack["torch"] == "2.13.0"
    assert labels["io.gpuenv.cuda"] == stack["cuda"] and labels["io.gpuenv.python"] == "3.11"
    assert labels["io.gpuenv.driver-min"] == stack["driver_min"]
    assert labels["org.opencontainers.image.base.name"] == "gpuenv-standin:bookworm"
    in_image = json.loads(_run(docker_client, TAG, ["cat", labels["io.gpuenv.stack-file"]]))
    assert in_image == stack


def test_changing_only_the_app_reuses_every_layer_above_it(
    built: dict[str, Any],
    docker_env: dict[str, str],
    standin_image: str,
    wheelhouse: Path,
    app_dir: Path,
    docker_client: Any,
) -> None:
    (app_dir / "main.py").write_text("print('app version 2')\n")
    again = _build(docker_env, _build_args(standin_image, wheelhouse, app_dir, "--tag", "gpuenv-test/e2e:2"))
    steps = again["steps"]
    instructions = {int(k): v for k, v in again.get("instructions", {}).items()}
    app_step = next(n for n, text in instructions.items() if text.startswith("COPY --chown=app:app app/"))
    run_steps = [n for n, text in instructions.items() if text.startswith(("RUN", "COPY")) and n < app_step]
    if again["gpuenv_wheel_sha256"] != built["gpuenv_wheel_sha256"]:
        # gpuenv's own source changed between the two builds (a shared working tree): its layer and
        # those after it are rebuilt, rightly; the torch layer must still be reused.
        wheel_step = next(n for n, text in instructions.items() if "gpuenv-wheel/" in text)
        run_steps = [n for n in run_steps if n < wheel_step]
    assert run_steps and set(run_steps) <= set(again["cached_steps"]), again["cached_steps"]
    torch_step = next(n for n, text in instructions.items() if "requirements.txt" in text and text.startswith("RUN"))
    assert torch_step in again["cached_steps"]
    assert app_step not in again["cached_steps"] and steps == built["steps"]
    assert _run(docker_client, "gpuenv-test/e2e:2", ["python", "main.py"]).strip() == "app version 2"


def test_a_failing_build_step_exits_1_naming_the_step(
    built: dict[str, Any],
    docker_env: dict[str, str],
    standin_image: str,
    wheelhouse: Path,
    tmp_path: Path,
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "main.py").write_text("print('x')\n")
    (app / "requirements.txt").write_text("no-such-package-gpuenv==1.0\n")  # not in the wheelhouse
    result = run_gpuenv(*_build_args(standin_image, wheelhouse, app), env=docker_env, timeout=BUILD_TIMEOUT)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "gpuenv: error: build step" in result.stderr and "failed: RUN pip install" in result.stderr
    assert "app-requirements.txt" in result.stderr
    assert "no-such-package-gpuenv" in result.stderr  # pip's own last lines are shown


def test_a_failing_run_through_the_adapter(
    dockerd: services.Service, standin_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuenv.adapters import docker as adapter

    monkeypatch.setenv("DOCKER_HOST", dockerd.address)
    (tmp_path / "Dockerfile").write_text(
        f"FROM {standin_image}\nRUN echo ok\nRUN echo first-line && echo last-words-here && exit 7\nRUN echo never\n"
    )
    events: list[adapter.BuildEvent] = []
    with pytest.raises(BadResult) as failed:
        adapter.build(adapter.connect(), tmp_path, tag=None, network_mode="none", on_event=events.append)
    message = failed.value.message
    assert message.startswith("build step 3 failed: RUN echo first-line")
    assert "last-words-here" in message and "non-zero code: 7" in message
    assert [e.step for e in events if e.kind == "step"] == [1, 2, 3]


def test_a_missing_base_image_exits_1_with_a_mirror_hint(
    docker_env: dict[str, str],
    wheelhouse: Path,
    app_dir: Path,
) -> None:
    args = _build_args("127.0.0.1:9/no/such-image:1", wheelhouse, app_dir)
    result = run_gpuenv(*args, env=docker_env, timeout=300)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "FROM ${BASE_IMAGE}" in result.stderr and "--base-image" in result.stderr


def test_a_stopped_daemon_exits_3(
    tmp_path: Path, wheelhouse: Path, app_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(services.can_run_dockerd(), "needs root and dockerd")
    other = services.start_dockerd()
    address = other.address
    other.stop()
    result = run_gpuenv(*_build_args("gpuenv-standin:bookworm", wheelhouse, app_dir), env={"DOCKER_HOST": address})
    assert result.returncode == 3, result.stderr
    assert "cannot reach the Docker daemon" in result.stderr and "hint:" in result.stderr
    from gpuenv.adapters.docker import run_verify_in_image

    monkeypatch.setenv("DOCKER_HOST", address)
    with pytest.raises(CannotRun):
        run_verify_in_image(TAG, level="quick", device="cpu", timeout=30, extra_args=[], on_note=pytest.fail)


def test_push_to_a_real_registry_reports_the_digest(
    built: dict[str, Any],
    docker_env: dict[str, str],
    standin_image: str,
    wheelhouse: Path,
    app_dir: Path,
    registry: str,
) -> None:
    ref = f"{registry}/gpuenv/e2e:pushed"
    out = _build(docker_env, _build_args(standin_image, wheelhouse, app_dir, "--tag", ref, "--push"))
    digest = out["pushed"][ref]
    assert digest.startswith("sha256:")
    request = urllib.request.Request(
        f"http://{registry}/v2/gpuenv/e2e/manifests/pushed",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
        method="HEAD",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Docker-Content-Digest"] == digest


def test_pin_base_renders_and_builds_from_the_registry_digest(
    built: dict[str, Any],
    dockerd: services.Service,
    docker_env: dict[str, str],
    standin_image: str,
    wheelhouse: Path,
    app_dir: Path,
    registry: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuenv.adapters import docker as adapter

    monkeypatch.setenv("DOCKER_HOST", dockerd.address)
    client = adapter.connect()
    mirrored = f"{registry}/mirror/standin:bookworm"
    adapter.tag(client, standin_image, mirrored)
    digest = adapter.push(client, mirrored)
    args = _build_args(mirrored, wheelhouse, app_dir, "--pin-base")
    rendered = run_gpuenv(*args, "--render-only", str(tmp_path / "ctx"), env=docker_env)
    assert rendered.returncode == 0, rendered.stderr
    assert f"ARG BASE_IMAGE={mirrored}@{digest}\n" in (tmp_path / "ctx" / "Dockerfile").read_text()
    out = _build(docker_env, [*args, "--tag", "gpuenv-test/e2e:pinned"])
    assert out["base_image"] == f"{mirrored}@{digest}"
    assert out["labels"]["org.opencontainers.image.base.name"] == f"{mirrored}@{digest}"


def test_verify_in_image_falls_back_to_the_cpu_and_says_so(built: dict[str, Any], docker_env: dict[str, str]) -> None:
    """This daemon has no NVIDIA runtime: the GPU request fails, so the run goes to the CPU, said as a warning
    beside the image's report (through the CLI: `gpuenv verify --image`)."""
    proc = run_gpuenv("verify", "--image", TAG, "--level", "quick", "--json", env=docker_env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    warning = next(line for line in proc.stderr.splitlines() if line.startswith("warning:"))
    assert "on the CPU" in warning and "could not select device driver" in warning
    report = json.loads(proc.stdout)
    assert report["image_run"]["gpus"] is False and report["verdict"]["certified"] is True
    # the image's Python and OS are not the host's: left out inside, the host's OS added from outside
    assert "python" not in report["host"] and report["host"].get("os") == host_os().get("os")
    proc = run_gpuenv("verify", "--image", TAG, "--device", "cuda", env=docker_env, timeout=120)
    assert proc.returncode == 3 and "cannot give containers GPUs" in proc.stderr, proc.stderr


def test_as_a_rocm_image_on_a_host_without_amd_devices_it_is_verified_on_the_cpu(
    built: dict[str, Any], dockerd: services.Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked as a ROCm image, the run wants /dev/kfd and /dev/dri instead of NVIDIA's runtime; this host has
    no /dev/kfd, so it verifies on the CPU and says so. A daemon that finds the nodes missing itself (as one
    elsewhere would) is read the same way."""
    from gpuenv.adapters import docker_gpus
    from gpuenv.adapters.docker import run_verify_in_image

    require(not Path("/dev/kfd").exists(), "this host has an amdgpu driver loaded")
    monkeypatch.setenv("DOCKER_HOST", dockerd.address)
    notes: list[str] = []
    code, report = run_verify_in_image(
        TAG, level="quick", device="auto", timeout=600, extra_args=[], on_note=notes.append, platform="rocm"
    )
    assert notes and "no /dev/kfd" in notes[0] and "on the CPU" in notes[0]
    assert code == 0 and report is not None and report["image_run"]["gpus"] is False
    monkeypatch.setattr(docker_gpus, "device_groups_of_daemon", lambda: ())
    with pytest.raises(CannotRun, match="error gathering device information") as failed:
        run_verify_in_image(
            TAG, level="quick", device="cuda", timeout=60, extra_args=[], on_note=pytest.fail, platform="rocm"
        )
    assert "amdgpu" in (failed.value.hint or "")


def test_run_in_image_times_out_and_removes_the_container(
    built: dict[str, Any], dockerd: services.Service, docker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuenv.adapters import docker as adapter

    monkeypatch.setenv("DOCKER_HOST", dockerd.address)
    before = {c.id for c in docker_client.containers.list(all=True)}
    with pytest.raises(BadResult, match="ran past 2 s"):
        adapter.run_in_image(adapter.connect(), TAG, ["sleep", "60"], gpus=False, timeout=2)
    assert {c.id for c in docker_client.containers.list(all=True)} == before
    done = adapter.run_in_image(
        adapter.connect(), TAG, ["sh", "-c", "echo out; echo err >&2; exit 3"], gpus=False, timeout=60
    )
    assert (done.exit_code, done.stdout, done.stderr) == (3, "out\n", "err\n")
    assert {c.id for c in docker_client.containers.list(all=True)} == before


def test_docker_cli_sees_the_same_image(built: dict[str, Any], dockerd: services.Service) -> None:
    """The image is an ordinary one: the docker CLI lists it with its labels."""
    require(shutil.which("docker") is not None, "needs the docker CLI (apt-get install docker.io)")
    result = subprocess.run(
        [
            "docker",
            "-H",
            dockerd.address,
            "image",
            "inspect",
            TAG,
            "--format",
            '{{ index .Config.Labels "io.gpuenv.torch" }}',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.strip() == "2.13.0", result.stderr


def test_verify_in_an_image_without_gpuenv_says_so(
    standin_image: str, dockerd: services.Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuenv.adapters.docker import run_verify_in_image

    monkeypatch.setenv("DOCKER_HOST", dockerd.address)
    with pytest.raises(BadResult, match="has no gpuenv"):
        run_verify_in_image(standin_image, level="quick", device="cpu", timeout=60, extra_args=[], on_note=pytest.fail)


def _locks_on_dev_null(pid: int) -> list[str]:
    """The locks a process holds through its descriptors of /dev/null (fdinfo's `lock:` lines)."""
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) == "/dev/null":
                found += [line for line in (fd.parent.parent / "fdinfo" / fd.name).read_text().splitlines()]
        except OSError:  # closed meanwhile
            continue
    return [line for line in found if line.startswith("lock:")]


def test_the_test_dockerd_leaves_dev_null_unlocked(dockerd: services.Service) -> None:
    """dockerd takes an open-file-description lock on its standard input: were that the suite's
    /dev/null, every process sharing it (the suite, each command and daemon it starts) would hold
    /dev/null locked, and an SQLite file opened there would wait out its busy timeout."""
    assert _locks_on_dev_null(dockerd.process.pid) == []
    assert _locks_on_dev_null(os.getpid()) == []
