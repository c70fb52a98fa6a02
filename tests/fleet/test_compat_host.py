"""`fleet compat` judges a stack installed on the host (--requirements, --on-host, provision --fleet) against the
host's OS and Python as its verify report records them; an image brings its own. Through the CLI, over generated
fleets (tests/fleet/compat_fleet.py), each rule with a host it fails, one it warns of and a healthy control."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from gpuenv.fleet.compat_rules import NO_OS
from gpuenv.fleet.source import OnHost
from gpuenv.kb import load_kb
from gpuenv.resources import data_file
from gpuenv.verify import launch, reportfile
from tests.conftest import gpuenv_main
from tests.fleet.compat_fleet import Spec, write_fleet
from tests.fleet.test_compat import CU128, compat, states

H100, DRIVER = "NVIDIA H100 80GB HBM3", "570.124.06"


def host(name: str, os: str | None = "ubuntu22.04", python: str | None = "3.10", **more: str) -> Spec:
    return Spec(name, H100, "9.0", DRIVER, os=os, python=python, **more)  # type: ignore[arg-type]


FLEET = (
    host("u22-001"),  # control: the OS the stacks below are resolved for
    host("rocky-001", "rockylinux9", "3.11"),
    host("fedora-001", "fedora40", "3.12"),  # an OS the knowledge base does not know
    host("old-001", None, None),  # a report of a gpuenv that did not record the OS (or written in a container)
)


def resolved(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """A stack file as `gpuenv resolve --json` writes it."""
    assert gpuenv_main("resolve", "--torch", CU128, *args, "--json") == 0
    path = tmp_path / f"stack{len(list(tmp_path.glob('stack*')))}.json"
    path.write_text(capsys.readouterr().out)
    return str(path)


def reasons(doc: dict) -> dict[str, list[str]]:
    return {h["host"]: h["reasons"] for h in doc["hosts"]}


def test_an_ubuntu_stack_on_the_host_runs_there_and_is_judged_against_each_other_os(tmp_path, capsys) -> None:
    folder = str(write_fleet(tmp_path / "fleet", FLEET))
    stack = resolved(tmp_path, capsys, "--os", "ubuntu22.04", "--python", "3.11")  # Python 3.11 as Rocky 9 has
    code, doc = compat(capsys, folder, "--stack", stack, "--on-host")
    assert code == 1
    assert states(doc) == {"u22-001": "runs", "rocky-001": "caveat", "fedora-001": "unknown", "old-001": "caveat"}
    said = reasons(doc)
    assert said["rocky-001"] == [
        "the stack was resolved for ubuntu22.04, the host runs rockylinux9: resolve it with --os rockylinux9"
    ]
    assert said["fedora-001"] == ["its OS fedora40 is not one the knowledge base knows as a host's"]
    assert said["old-001"] == [NO_OS]  # not checked, as a report without the CPU architecture
    assert doc["installed"] == "host"  # how it was judged, said
    assert compat(capsys, folder, "--stack", stack, "--on-host", "--strict")[0] == 1


def test_a_python_the_hosts_os_cannot_give_does_not_run_there(tmp_path, capsys) -> None:
    folder = str(write_fleet(tmp_path / "fleet", FLEET[:2]))
    stack = resolved(tmp_path, capsys, "--os", "ubuntu22.04", "--python", "3.10")
    code, doc = compat(capsys, folder, "--stack", stack, "--on-host")
    assert (code, states(doc)) == (1, {"u22-001": "runs", "rocky-001": "no"})
    group = next(g for g in doc["groups"] if g["state"] == "no")
    assert group["reason"] == "rockylinux9 has no known way to provide Python 3.10 (has 3.11, 3.12)"
    assert group["constraint"] == "python"


def test_a_rocky_stack_says_what_ubuntu_adds_and_only_the_os_it_was_asked_for_runs_it_with_os(tmp_path, capsys) -> None:
    folder = str(write_fleet(tmp_path / "fleet", FLEET[:2]))
    stack = resolved(tmp_path, capsys, "--os", "rockylinux9", "--python", "3.12")
    doc = compat(capsys, folder, "--stack", stack, "--on-host")[1]
    assert states(doc) == {"u22-001": "caveat", "rocky-001": "runs"}
    assert reasons(doc)["u22-001"] == [
        "the stack was resolved for rockylinux9, the host runs ubuntu22.04: resolve it with --os ubuntu22.04",
        "Python 3.12 on ubuntu22.04 comes from the deadsnakes PPA, a third-party repository",
    ]
    code, doc = compat(capsys, folder, "--torch", CU128, "--os", "rockylinux9", "--on-host")  # provision --os refuses
    assert (code, states(doc)) == (1, {"u22-001": "no", "rocky-001": "runs"})
    assert reasons(doc)["u22-001"] == ["the host runs ubuntu22.04, --os asks for rockylinux9"]
    code, doc = compat(capsys, folder, "--torch", CU128, "--on-host")  # each host's own OS and Python, as provision
    assert (code, set(states(doc).values())) == (0, {"runs"})


def test_a_rocm_stack_is_not_provisioned_on_an_os_the_amdgpu_role_does_not_implement(tmp_path, capsys) -> None:
    from tests.fleet import amd_reports

    specs = tuple(
        Spec(f"mi300x-{os}", amd_reports.MI300X, "gfx942", amd_reports.AMDGPU, os=os, python="3.11")
        for os in ("ubuntu22.04", "debian12")
    )
    code, doc = compat(capsys, str(write_fleet(tmp_path / "fleet", specs)), "--gpu", "MI300X", "--on-host")
    assert (code, states(doc)) == (1, {"mi300x-ubuntu22.04": "runs", "mi300x-debian12": "no"})
    assert "is not provisioned on debian12: the amdgpu role does not implement it" in reasons(doc)["mi300x-debian12"][0]
    lock = tmp_path / "requirements.txt"  # pip into the host's Python: AMD supports the release on Debian 12
    lock.write_text(f"torch=={doc['stack']['torch']}+{doc['stack']['build']}\n")
    code, doc = compat(capsys, str(tmp_path / "fleet"), "--requirements", str(lock))
    assert (code, set(states(doc).values())) == (0, {"runs"})


def test_without_on_host_a_stack_file_is_an_image_and_the_hosts_os_is_not_its(tmp_path, capsys) -> None:
    folder = str(write_fleet(tmp_path / "fleet", FLEET))
    stack = resolved(tmp_path, capsys, "--os", "ubuntu22.04", "--python", "3.10")
    code, doc = compat(capsys, folder, "--stack", stack)
    assert (code, set(states(doc).values()), doc["installed"]) == (0, {"runs"}, "image")
    assert gpuenv_main("fleet", "compat", folder, "--stack", stack, "--markdown") == 0
    assert "judged as an image: it brings its OS and Python" in capsys.readouterr().out


def test_an_image_brings_its_own_os_and_python(tmp_path, capsys, monkeypatch) -> None:
    """The image's labels as the Docker engine answers them (gpuenv.adapters.docker.image_config)."""
    from gpuenv.adapters import docker
    from gpuenv.render.dockerfile import render_image
    from gpuenv.render.options import ImageOptions
    from gpuenv.resolve.request import Request
    from gpuenv.resolve.service import resolve

    kb = load_kb(None)
    stack = resolve(kb, Request(torch=CU128, python="3.10", purpose="image"))
    labels = render_image(stack, ImageOptions(), kb.os_by_name[stack.os]).labels
    monkeypatch.setattr(docker, "image_config", lambda ref, client=None: (labels, "amd64"))
    folder = str(write_fleet(tmp_path / "fleet", FLEET))
    code, doc = compat(capsys, folder, "--image", "train:2.7")
    assert (code, set(states(doc).values())) == (0, {"runs"})  # rocky-001 cannot give Python 3.10: the image does
    assert gpuenv_main("fleet", "compat", folder, "--image", "train:2.7", "--on-host") == 2
    assert "an image brings its own OS and Python" in capsys.readouterr().err


PYLOCK = (
    'lock-version = "1.0"\ncreated-by = "uv"\n[[packages]]\nname = "torch"\nversion = "2.7.0+cu128"\n'
    'index = "https://download.pytorch.org/whl/cu128"\n[[packages.wheels]]\n'
    'url = "https://download.pytorch.org/whl/cu128/torch-2.7.0%2Bcu128-cp3{0}-cp3{0}-manylinux_2_28_x86_64.whl"\n'
)


def test_a_lockfile_is_pip_installed_into_the_hosts_python(tmp_path, capsys) -> None:
    folder = str(write_fleet(tmp_path / "fleet", (*FLEET[:2], host("u22-002", python="3.11"))))
    lock = tmp_path / "pylock.toml"
    lock.write_text(PYLOCK.format(11))
    code, doc = compat(capsys, folder, "--requirements", str(lock))
    assert (code, states(doc)) == (0, {"u22-001": "caveat", "rocky-001": "runs", "u22-002": "runs"})
    assert doc["installed"] == "pip"
    assert reasons(doc)["u22-001"] == [
        "the host runs Python 3.10, the lockfile's wheels Python 3.11: install it (Ubuntu 22.04 universe python3.11)"
    ]
    lock.write_text(PYLOCK.format(10))
    code, doc = compat(capsys, folder, "--requirements", str(lock))
    assert (code, states(doc)) == (1, {"u22-001": "runs", "rocky-001": "no", "u22-002": "caveat"})
    requirements = tmp_path / "requirements.txt"  # no wheel tags: any Python torch has wheels for
    requirements.write_text("--index-url https://download.pytorch.org/whl/cu128\ntorch==2.7.0\n")
    code, doc = compat(capsys, folder, "--requirements", str(requirements))
    assert (code, set(states(doc).values())) == (0, {"runs"})


def project(tmp_path: Path, *args: str) -> tuple[str, ...]:
    return ("provision", "gpu01", "--torch", CU128, *args, "--render-only", str(tmp_path / "project"))


def test_provision_fleet_judges_the_hosts_os_and_build_image_does_not(tmp_path, capsys) -> None:
    folder = str(write_fleet(tmp_path / "fleet", FLEET[:2]))
    assert gpuenv_main(*project(tmp_path), "--fleet", folder) == 0  # Python 3.10, the default OS's
    err = capsys.readouterr().err
    assert "warning: the fleet" in err
    assert "does not run: rocky-001 (rockylinux9 has no known way to provide Python 3.10 (has 3.11, 3.12))" in err
    assert gpuenv_main(*project(tmp_path / "strict"), "--fleet", folder, "--strict") == 2
    assert "rocky-001" in capsys.readouterr().err and not (tmp_path / "strict" / "project").exists()
    assert gpuenv_main(*project(tmp_path / "ok", "--python", "3.11"), "--fleet", folder, "--strict") == 2
    assert "caveat: rocky-001 (the stack was resolved for ubuntu22.04" in capsys.readouterr().err
    ubuntu = str(write_fleet(tmp_path / "ubuntu", FLEET[:1]))
    assert gpuenv_main(*project(tmp_path / "control"), "--fleet", ubuntu, "--strict") == 0
    assert "the fleet" not in capsys.readouterr().err
    image = ("build-image", "--torch", CU128, "--render-only", str(tmp_path / "image"))
    assert gpuenv_main(*image, "--fleet", folder, "--strict") == 0  # an image brings its Python
    assert "the fleet" not in capsys.readouterr().err


def test_verify_records_the_hosts_os_and_python_and_compat_reads_them(tmp_path, capsys, monkeypatch) -> None:
    """This test machine is a container: verify is told it runs on the host to write what a host's would."""
    monkeypatch.setattr(launch, "pci_scope", lambda root=Path("/"): "host")
    report = tmp_path / "fleet" / "this.json"
    report.parent.mkdir()
    assert gpuenv_main("verify", "--passive", "--device", "cpu", "--report", str(report)) in (0, 1, 3)
    capsys.readouterr()
    found = reportfile.read(report)
    assert not isinstance(found, reportfile.Skipped) and isinstance(found.document, reportfile.VerifyReport)
    expected = launch.os_name(launch.read_os_release(Path("/etc/os-release")))
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert (found.document.host.os, found.document.host.python) == (expected, python)
    written = json.loads(report.read_text())
    assert written["host"]["os_release"] == launch.read_os_release(Path("/etc/os-release"))
    jsonschema.validate(written, json.loads(data_file("report.schema.json").read_text()))


@pytest.mark.parametrize(
    ("os_release", "container", "expected"),
    [
        ('NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\n', False, {"os": "ubuntu22.04"}),
        ('ID="almalinux"\nVERSION_ID="9.4"\n', False, {"os": "rockylinux9"}),  # RHEL's kin, by major
        ("ID=arch\n", False, {"os": "arch"}),  # unknown to the knowledge base: its own ID says what it is
        (None, False, {}),  # no os-release: nothing said, never a guess
        ('ID=ubuntu\nVERSION_ID="24.04"\n', True, None),  # inside a container: the image's OS, not the host's
    ],
)
def test_host_os_reads_os_release_and_says_nothing_inside_a_container(
    tmp_path, monkeypatch, os_release: str | None, container: bool, expected: dict | None
) -> None:
    monkeypatch.delenv("container", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    (tmp_path / "etc").mkdir()
    if os_release is not None:
        (tmp_path / "etc" / "os-release").write_text(os_release)
    if container:
        (tmp_path / ".dockerenv").touch()
    found = launch.host_os(tmp_path, python=True)
    if expected is None:
        assert found == {}
        return
    assert {k: v for k, v in found.items() if k == "os"} == expected
    assert found["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert ("os_release" in found) == bool(expected)


def test_an_older_report_reads_with_the_os_and_python_not_recorded(tmp_path) -> None:
    path = write_fleet(tmp_path, (host("old-001", None, None),)) / "old-001.json"
    assert "os" not in json.loads(path.read_text())["host"]
    found = reportfile.read(path)
    assert not isinstance(found, reportfile.Skipped) and isinstance(found.document, reportfile.VerifyReport)
    assert (found.document.host.os, found.document.host.python) == (None, None)


@pytest.mark.parametrize(
    ("constraints", "render_only", "expected"),
    [
        ({}, False, OnHost()),  # each host resolved on its own OS, with the Python it gives
        ({"python": "3.11"}, False, OnHost(python="3.11")),
        ({"os": "rockylinux9"}, False, OnHost("rockylinux9", only_os=True)),  # provision refuses another OS
        ({}, True, OnHost("ubuntu22.04", "3.10")),  # --render-only: one stack, the default OS's, for every host
    ],
)
def test_provision_says_how_it_installs_the_stack_it_judges(tmp_path, constraints, render_only, expected) -> None:
    from gpuenv.ansible.hosts import Hosts
    from gpuenv.provision.plan import ProvisionRequest, on_host, prepare_project
    from gpuenv.resolve.request import Request
    from gpuenv.stack_service import StackRequest

    request = ProvisionRequest(
        hosts=Hosts(names=("gpu01",)),
        stack=StackRequest(Request(torch=CU128, **constraints)),
        render_only=tmp_path / "project" if render_only else None,
    )
    project = prepare_project(request, kb_path=None, prompt=lambda _: "")
    assert on_host(project) == expected
