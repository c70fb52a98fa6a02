"""How an image's container gets the host's GPUs: AMD's device nodes for a ROCm image, NVIDIA's device
request for a CUDA one, and what certification does on a host without them.

The Docker SDK's client is replaced at its edge (containers.create, the container's calls, inspect_image):
the arguments gpuenv hands it are what these tests read. The same code runs against a real daemon in
test_docker.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpuenv.adapters import docker as adapter
from gpuenv.adapters import docker_gpus
from gpuenv.errors import BadResult, CannotRun

REPORT = b'{"schema": "gpuenv.report/2", "verdict": {"certified": true}}\n'
ROCM_LABELS = {"io.gpuenv.rocm": "6.4", "io.gpuenv.build": "rocm6.4"}
CUDA_LABELS = {"io.gpuenv.cuda": "12.8.1", "io.gpuenv.build": "cu128"}


class FakeContainer:
    def start(self) -> None:
        pass

    def wait(self, timeout: float) -> dict[str, int]:
        return {"StatusCode": 0}

    def logs(self, stdout: bool = True, stderr: bool = True, tail: int | None = None) -> bytes:
        return REPORT if stdout and not stderr else b""

    def remove(self, force: bool) -> None:
        pass


class FakeClient:
    """containers.create records its keywords; with refuse_gpus it fails as a daemon without NVIDIA's runtime."""

    def __init__(self, labels: dict[str, str], *, refuse_gpus: str | None = None) -> None:
        self.created: list[dict[str, Any]] = []
        self.refuse_gpus = refuse_gpus
        self.labels = labels
        self.api = self
        self.containers = self

    def inspect_image(self, tag: str) -> dict[str, Any]:
        return {"Config": {"Labels": self.labels}}

    def create(self, image: str, *, command: list[str], **options: Any) -> FakeContainer:
        import docker.errors

        self.created.append({"command": command, **options})
        if self.refuse_gpus and ("device_requests" in options or "devices" in options):
            raise docker.errors.APIError(self.refuse_gpus)
        return FakeContainer()


@pytest.fixture
def fake_dev(tmp_path: Path) -> Path:
    """A /dev with AMD's nodes: kfd and two render nodes, owned by this process's group."""
    (tmp_path / "dri").mkdir()
    for node in ("kfd", "dri/renderD128", "dri/renderD129", "dri/card0"):
        (tmp_path / node).touch()
    return tmp_path


def _certify(
    monkeypatch: pytest.MonkeyPatch, client: FakeClient, *, device: str = "auto", dev: Path | None = None, **kw: Any
) -> tuple[int, dict[str, Any] | None, list[str]]:
    monkeypatch.setattr(adapter, "connect", lambda: client)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    notes: list[str] = []
    code, report = adapter.run_verify_in_image(
        "team/torch:rocm", level="quick", device=device, timeout=60, extra_args=[], on_note=notes.append, **kw
    )  # type: ignore[arg-type]
    return code, report, notes


def test_rocm_options_give_the_device_nodes_groups_ipc_and_shm_and_no_nvidia_request() -> None:
    options = docker_gpus.gpu_run_options("rocm", device_groups=(992, 44))
    assert options == {
        "devices": ["/dev/kfd", "/dev/dri"],
        "group_add": ["video", "992", "44"],
        "ipc_mode": "host",
        "shm_size": "8g",
    }


def test_cuda_options_are_the_nvidia_device_request_as_before() -> None:
    options = docker_gpus.gpu_run_options("cuda")
    assert set(options) == {"device_requests", "ipc_mode"} and options["ipc_mode"] == "host"
    (request,) = options["device_requests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]


def test_the_groups_are_those_owning_kfd_and_the_render_nodes(fake_dev: Path) -> None:
    if os.geteuid() == 0:  # as on a host: kfd and render nodes in "render", the card in "video" (not asked for)
        for node, gid in (("kfd", 992), ("dri/renderD128", 992), ("dri/renderD129", 993), ("dri/card0", 44)):
            os.chown(fake_dev / node, -1, gid)
        assert docker_gpus.amd_device_groups(fake_dev) == (992, 993)
    else:
        assert docker_gpus.amd_device_groups(fake_dev) == tuple(sorted({os.getgid()} - {0}))
    (fake_dev / "kfd").unlink()
    assert docker_gpus.amd_device_groups(fake_dev) is None


def test_no_local_dev_is_read_for_a_daemon_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://gpu-node:2375")
    monkeypatch.setattr(docker_gpus, "amd_device_groups", lambda: None)
    assert docker_gpus.device_groups_of_daemon() == ()
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
    assert docker_gpus.device_groups_of_daemon() is None


@pytest.mark.parametrize(
    "labels,platform",
    [
        (ROCM_LABELS, "rocm"),
        ({"io.gpuenv.build": "rocm6.2.4"}, "rocm"),
        ({"io.gpuenv.cuda-build": "rocm6.2.4"}, "rocm"),  # the label's name on images of stack schema /1
        (CUDA_LABELS, "cuda"),
        ({}, "cuda"),
    ],
)
def test_the_platform_is_read_from_the_image_labels(labels: dict[str, str], platform: str) -> None:
    assert docker_gpus.platform_of(labels) == platform


def test_a_rocm_image_is_certified_with_the_amd_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient(ROCM_LABELS)
    monkeypatch.setattr(docker_gpus, "amd_device_groups", lambda: (992,))
    code, report, notes = _certify(monkeypatch, client)
    (created,) = client.created
    assert created["devices"] == ["/dev/kfd", "/dev/dri"] and created["group_add"] == ["video", "992"]
    assert created["ipc_mode"] == "host" and created["shm_size"] == "8g" and created["network_mode"] == "none"
    assert "device_requests" not in created
    assert created["command"][-2:] == ["--device", "auto"]
    assert code == 0 and report is not None and report["image_run"]["gpus"] is True and notes == []


def test_a_cuda_image_is_certified_with_the_nvidia_request_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient(CUDA_LABELS)
    monkeypatch.setattr(docker_gpus, "amd_device_groups", lambda: pytest.fail("a CUDA image reads no /dev"))
    code, report, _ = _certify(monkeypatch, client)
    (created,) = client.created
    assert "devices" not in created and "group_add" not in created and "shm_size" not in created
    assert created["ipc_mode"] == "host" and created["device_requests"][0]["Count"] == -1
    assert code == 0 and report is not None and report["image_run"]["gpus"] is True


def test_the_caller_may_name_the_platform_instead_of_the_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient({})
    monkeypatch.setattr(docker_gpus, "amd_device_groups", lambda: ())
    _certify(monkeypatch, client, platform="rocm")
    assert client.created[0]["devices"] == ["/dev/kfd", "/dev/dri"]


def test_without_dev_kfd_a_rocm_image_is_verified_on_the_cpu_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient(ROCM_LABELS)
    monkeypatch.setattr(docker_gpus, "amd_device_groups", lambda: None)
    code, report, notes = _certify(monkeypatch, client)
    (created,) = client.created  # no GPU run was even tried
    assert "devices" not in created and created["command"][-2:] == ["--device", "cpu"]
    assert notes == ["no GPUs available to containers on this host (no /dev/kfd: the amdgpu kernel driver "
                     "is not loaded): verifying team/torch:rocm on the CPU"]  # fmt: skip
    assert (
        code == 0
        and report is not None
        and report["image_run"]
        == {
            "image": "team/torch:rocm",
            "gpus": False,
            "device": "cpu",
        }
    )


def test_without_dev_kfd_insisting_on_gpus_is_exit_3_with_the_amd_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker_gpus, "amd_device_groups", lambda: None)
    with pytest.raises(CannotRun, match="/dev/kfd") as failed:
        _certify(monkeypatch, FakeClient(ROCM_LABELS), device="cuda")
    assert "amdgpu" in (failed.value.hint or "") and "NVIDIA" not in (failed.value.hint or "")


def test_a_daemon_elsewhere_without_the_nodes_falls_back_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = 'error gathering device information while adding custom device "/dev/kfd": no such file or directory'
    client = FakeClient(ROCM_LABELS, refuse_gpus=missing)
    monkeypatch.setattr(adapter, "connect", lambda: client)
    monkeypatch.setenv("DOCKER_HOST", "tcp://gpu-node:2375")
    notes: list[str] = []
    code, _ = adapter.run_verify_in_image(
        "team/torch:rocm", level="quick", device="auto", timeout=60, extra_args=[], on_note=notes.append
    )
    assert [c.get("group_add") for c in client.created] == [["video"], None]
    assert code == 0 and "error gathering device information" in notes[0] and "on the CPU" in notes[0]


def test_a_cuda_host_without_the_toolkit_still_falls_back_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient(CUDA_LABELS, refuse_gpus='could not select device driver "" with capabilities: [[gpu]]')
    code, _, notes = _certify(monkeypatch, client)
    assert code == 0 and len(client.created) == 2
    assert notes[0].startswith("no GPUs available to containers on this host (could not select device driver)")
    with pytest.raises(CannotRun, match="cannot give containers GPUs") as failed:
        _certify(monkeypatch, FakeClient(CUDA_LABELS, refuse_gpus="could not select device driver"), device="cuda")
    assert "NVIDIA Container Toolkit" in (failed.value.hint or "")


def test_another_docker_error_is_not_taken_for_a_missing_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker_gpus, "amd_device_groups", lambda: ())
    with pytest.raises(BadResult, match="no space left"):
        _certify(monkeypatch, FakeClient(ROCM_LABELS, refuse_gpus="no space left on device"))
