"""CUDA forward compatibility through the CLI over a generated fleet: an image based on nvidia/cuda carries
cuda-compat-X-Y, a caveat on a data center GPU on a branch it serves and no run on a GeForce on an older driver;
a host stack on such a branch does not run until the package is installed, and is told which."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator

import pytest

from tests.conftest import gpuenv_main, require
from tests.fleet import fleet_reports as fr
from tests.fleet.compat_fleet import Spec, write_fleet

FLEET = (
    Spec("h100-535", fr.H100, "9.0", "535.104.05"),  # R535: cuda-compat-12-8 serves it on a data center GPU
    Spec("rtx4090-535", "NVIDIA GeForce RTX 4090", "8.9", "535.104.05"),  # a GeForce: never
    Spec("h100-570", fr.H100, "9.0", "570.124.06"),  # control: runs CUDA 12.8 natively
)
CU128 = ("--torch", "2.7.0+cu128")


def test_build_image_names_the_geforce_that_cannot_run_the_image_and_the_caveat_under_strict(tmp_path, capsys) -> None:
    fleet = str(write_fleet(tmp_path / "fleet", FLEET))
    assert gpuenv_main("build-image", *CU128, "--render-only", str(tmp_path / "image"), "--fleet", fleet) == 0
    err = capsys.readouterr().err
    assert "does not run: rtx4090-535 (its nvidia/cuda base carries cuda-compat-12-8" in err
    assert "forward compatibility is for NVIDIA data center GPUs only" in err and "h100-570" not in err
    assert gpuenv_main("build-image", *CU128, "--render-only", str(tmp_path / "strict"), "--fleet", fleet, "--strict")
    err = capsys.readouterr().err
    assert "runs with a caveat: h100-535" in err and "cuda-compat-12-8 runs CUDA 12.8.1 on R535" in err


def test_a_host_stack_the_same_hosts_run_through_minor_version_compatibility(tmp_path, capsys) -> None:
    """provision installs no cuda-compat: the host's own driver decides, as resolve's rules say."""
    folder = str(write_fleet(tmp_path, FLEET))
    code = gpuenv_main("fleet", "compat", folder, *CU128, "--on-host", "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {h["host"]: h["state"] for h in doc["hosts"]} == {
        "h100-535": "caveat",
        "rtx4090-535": "caveat",
        "h100-570": "runs",
    }
    said = {h["host"]: " ".join(h["reasons"]) for h in doc["hosts"]}
    assert "cuda-compat-12-8" in said["h100-535"] and "cuda-compat" not in said["rtx4090-535"]
    assert gpuenv_main("fleet", "compat", folder, *CU128, "--json") == 1  # the same stack as an image: cuda-compat
    image = {h["host"]: h["state"] for h in json.loads(capsys.readouterr().out)["hosts"]}
    assert image == {"h100-535": "caveat", "rtx4090-535": "no", "h100-570": "runs"}


def test_a_cuda_13_host_stack_on_r535_does_not_run_and_says_which_package_would(tmp_path, capsys) -> None:
    fleet = str(write_fleet(tmp_path, FLEET))
    code = gpuenv_main("fleet", "compat", fleet, "--torch", "2.9.0+cu130", "--on-host", "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert {h["state"] for h in doc["hosts"]} == {"no"}  # 13.x needs R580; cuda-compat-13-0 serves R535 and R570
    assert "cuda-compat-13-0 runs CUDA 13.0.3 on R535 on the data center H100" in hosts["h100-535"]["reasons"][0]
    assert "cuda-compat-13-0 runs CUDA 13.0.3 on R570" in hosts["h100-570"]["reasons"][0]
    assert "cuda-compat" not in hosts["rtx4090-535"]["reasons"][0]


# --- an image built by build-image, read from a real Docker engine -------------------------------------------


@pytest.fixture(scope="module")
def labelled_image() -> Iterator[tuple[str, str]]:
    """An image carrying the labels build-image puts on a torch 2.7.0+cu128 image (imported: no registry)."""
    from tests.build_image import services

    require(services.can_run_dockerd(), "needs root and dockerd (apt-get install docker.io) for a real Docker engine")
    import docker

    daemon = services.start_dockerd()
    try:
        client = docker.DockerClient(base_url=daemon.address, timeout=120)
        layer = io.BytesIO()
        with tarfile.open(fileobj=layer, mode="w") as tar:
            info = tarfile.TarInfo("etc/image")
            tar.addfile(info, io.BytesIO(b""))
        labels = {"torch": "2.7.0", "build": "cu128", "python": "3.12", "os": "ubuntu24.04"}
        changes = [f"LABEL io.gpuenv.{key}={value}" for key, value in labels.items()]
        client.api.import_image_from_data(layer.getvalue(), repository="gpuenv-test/cu128", tag="1", changes=changes)
        client.close()
        yield "gpuenv-test/cu128:1", daemon.address
    finally:
        daemon.stop()


@pytest.mark.docker
@pytest.mark.integration
def test_fleet_compat_of_an_image_caveat_no_and_control(tmp_path, capsys, monkeypatch, labelled_image) -> None:
    image, address = labelled_image
    monkeypatch.setenv("DOCKER_HOST", address)
    code = gpuenv_main("fleet", "compat", str(write_fleet(tmp_path, FLEET)), "--image", image, "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 1, doc
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert {name: h["state"] for name, h in hosts.items()} == {
        "h100-535": "caveat",
        "rtx4090-535": "no",
        "h100-570": "runs",
    }
    said = " ".join(hosts["h100-535"]["reasons"])
    assert "cuda-compat-12-8 runs CUDA 12.8.1 on R535 on the data center H100" in said
    assert "error 804" in hosts["rtx4090-535"]["reasons"][0]
