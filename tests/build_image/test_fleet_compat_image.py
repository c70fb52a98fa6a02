"""`fleet compat --image` against a real Docker engine: an image carrying the labels build-image renders for a
cu128 stack (built FROM scratch with them: cheap, and the labels are all the check reads) is judged by them;
an image without gpuenv's labels is refused with a hint."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from gpuenv.kb import load_kb
from gpuenv.render.dockerfile import render_image
from gpuenv.render.options import ImageOptions
from gpuenv.resolve.request import Request
from gpuenv.resolve.service import resolve
from tests.build_image import services
from tests.conftest import gpuenv_main
from tests.fleet.compat_fleet import Spec, write_fleet


def _image(client: Any, tag: str, labels: dict[str, str]) -> str:
    lines = ["FROM scratch", *(f"LABEL {json.dumps(k)}={json.dumps(v)}" for k, v in labels.items())]
    client.images.build(fileobj=io.BytesIO("\n".join(lines).encode()), tag=tag, rm=True)
    return tag


def test_an_image_is_judged_from_its_labels(
    tmp_path, capsys, monkeypatch: pytest.MonkeyPatch, dockerd: services.Service, docker_client: Any
) -> None:
    monkeypatch.setenv("DOCKER_HOST", dockerd.address)
    kb = load_kb(None)
    stack = resolve(kb, Request(torch="2.7.0+cu128", purpose="image"))
    labels = render_image(stack, ImageOptions(), kb.os_by_name[stack.os]).labels
    fleet = str(write_fleet(tmp_path / "fleet"))
    tag = _image(docker_client, "gpuenv-test/compat:cu128", labels)
    assert gpuenv_main("fleet", "compat", fleet, "--image", tag, "--json") == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["stack"]["torch"], doc["stack"]["build"], doc["stack"]["cpu_arch"]) == ("2.7.0", "cu128", "x86_64")
    states = {h["host"]: h["state"] for h in doc["hosts"]}
    assert states["v100-001"] == "no" and states["a100-001"] == "no" and states["h100-002"] == "runs"
    rocky = (Spec("rocky-001", "NVIDIA H100", "9.0", "570.124.06", os="rockylinux9", python="3.11"),)
    rocky_fleet = str(write_fleet(tmp_path / "rocky", rocky))  # Rocky Linux 9 has no Python 3.10: the image has
    assert (stack.python, gpuenv_main("fleet", "compat", rocky_fleet, "--image", tag)) == ("3.10", 0)
    assert gpuenv_main("fleet", "compat", rocky_fleet, "--image", tag, "--on-host") == 2
    assert "an image brings its own OS and Python" in capsys.readouterr().err
    plain = _image(docker_client, "gpuenv-test/compat:plain", {"team": "ml"})
    assert gpuenv_main("fleet", "compat", fleet, "--image", plain) == 2
    assert "has no gpuenv labels" in capsys.readouterr().err
