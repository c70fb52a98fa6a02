"""The smaller holes: --force and --artifacts-dir touch only gpuenv's files, host reports of any
shape, --app trees gpuenv cannot copy, what is printed for copy and paste, and loose grammars."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gpuenv.verify.reportfile import verdict_of
from tests.conftest import run_gpuenv

NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
STACK = ("--os", "debian12", "--python", "3.11", "--torch", "2.13.0")


def bad_request(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


# --- item 7: --force replaces only what gpuenv wrote --------------------------------------------


def test_force_leaves_the_users_app_and_wheels_alone(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    for name in ("app", "wheels"):
        (proj / name).mkdir(parents=True)
        (proj / name / "mine.py").write_text("precious\n")
    out = run_gpuenv("build-image", "--cuda", "12.4", "--render-only", str(proj), "--force", env=NO_DOCKER)
    assert out.returncode == 0, out.stderr
    assert (proj / "app" / "mine.py").read_text() == "precious\n"
    assert (proj / "wheels" / "mine.py").read_text() == "precious\n"
    assert "gpuenv-wheel" in json.loads((proj / ".gpuenv-manifest").read_text())["entries"]


def test_force_refuses_a_users_directory_where_gpuenv_would_write(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    app = tmp_path / "src"
    app.mkdir()
    (app / "main.py").write_text("print(1)\n")
    (proj / "app").mkdir(parents=True)
    (proj / "app" / "mine.py").write_text("precious\n")
    out = run_gpuenv(
        "build-image", "--cuda", "12.4", "--app", str(app), "--render-only", str(proj), "--force", env=NO_DOCKER
    )
    bad_request(out, "is not gpuenv's")
    assert (proj / "app" / "mine.py").read_text() == "precious\n"


def test_force_replaces_what_gpuenv_wrote_before(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    app = tmp_path / "src"
    app.mkdir()
    (app / "main.py").write_text("print(1)\n")
    args = ("build-image", "--cuda", "12.4", "--render-only", str(proj))
    assert run_gpuenv(*args, "--app", str(app), env=NO_DOCKER).returncode == 0
    (app / "main.py").write_text("print(2)\n")
    out = run_gpuenv(*args, "--app", str(app), "--force", env=NO_DOCKER)
    assert out.returncode == 0, out.stderr
    assert (proj / "app" / "main.py").read_text() == "print(2)\n"


def test_artifacts_dir_never_overwrites_a_project_gpuenv_did_not_write(tmp_path: Path) -> None:
    work = tmp_path / "mywork"
    (work / "project").mkdir(parents=True)
    (work / "project" / "site.yml").write_text("# my own playbook\n")
    out = run_gpuenv("provision", "gpu01", *STACK, "--artifacts-dir", str(work), "--skip-verify")
    bad_request(out, "is not a project gpuenv wrote")
    assert (work / "project" / "site.yml").read_text() == "# my own playbook\n"


# --- host reports, --app trees ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('["a"]', "unreadable report"),
        ('"certified"', "unreadable report"),
        ('{"verdict": "x"}', "unreadable report"),
        ('{"verdict": {"outcome": "\\u001b[2Jcertified"}}', "unreadable report"),
        ("[" * 100_000, "unreadable report"),
        ('{"verdict": {"outcome": "not certified"}}', "unreadable report"),  # no schema: not a gpuenv report
        ('{"schema": "gpuenv.verify-report/2", "verdict": {"outcome": "not certified"}}', "not certified"),
    ],
)
def test_any_host_report_gives_an_outcome_not_a_crash(tmp_path: Path, text: str, expected: str) -> None:
    report = tmp_path / "h1.json"
    report.write_text(text)
    assert verdict_of(report)[0] == expected


@pytest.mark.parametrize("kind", ["fifo", "unreadable"])
def test_an_app_gpuenv_cannot_copy_is_exit_2_and_nothing_is_written(tmp_path: Path, kind: str) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "main.py").write_text("print(1)\n")
    bad = app / "data"
    if kind == "fifo":
        os.mkfifo(bad)
    else:
        bad.write_text("secret")
        bad.chmod(0)
        if os.access(bad, os.R_OK):
            pytest.skip("root reads any file: the unreadable case needs an ordinary user")
    out_dir = tmp_path / "out"
    out = run_gpuenv("build-image", "--cuda", "12.4", "--app", str(app), "--render-only", str(out_dir), env=NO_DOCKER)
    bad_request(out, str(bad))
    assert not out_dir.exists()


# --- what is printed, and loose grammars --------------------------------------------------------


def test_the_printed_build_command_is_quoted(tmp_path: Path) -> None:
    dest = tmp_path / "o; rm -rf ~"
    out = run_gpuenv("build-image", "--cuda", "12.4", "--render-only", str(dest), env=NO_DOCKER)
    assert out.returncode == 0, out.stderr
    assert f"'{dest}'" in out.stdout


@pytest.mark.parametrize("host", [":::::::", "a:22:33", "all"])
def test_loose_host_arguments_are_refused(tmp_path: Path, host: str) -> None:
    bad_request(run_gpuenv("provision", host, *STACK, "--render-only", str(tmp_path / "p")), "invalid host")


@pytest.mark.parametrize("venv", ["-1", "relative/venv", "/opt/../etc"])
def test_venv_must_be_absolute(tmp_path: Path, venv: str) -> None:
    bad_request(run_gpuenv("provision", "gpu01", *STACK, f"--venv={venv}", "--render-only", str(tmp_path / "p")))


@pytest.mark.parametrize("limit", ["-vvv", "--help"])
def test_a_limit_that_looks_like_an_option_is_refused(limit: str) -> None:
    bad_request(run_gpuenv("provision", "gpu01", *STACK, f"--limit={limit}", "--skip-verify"), "--limit")


def test_a_tag_with_a_double_dot_is_not_an_image_reference(tmp_path: Path) -> None:
    bad_request(
        run_gpuenv("build-image", "--cuda", "12.4", "--tag", "11..7", "--render-only", str(tmp_path / "o")),
        "invalid --tag",
    )


def test_a_limit_that_matches_no_host_is_a_bad_request(tmp_path: Path) -> None:
    import shutil
    import sys

    from tests.conftest import require

    bin_dir = Path(sys.executable).parent
    require(shutil.which("ansible-playbook", path=str(bin_dir)) is not None, "ansible-core is not installed")
    out = run_gpuenv(
        "provision",
        "gpu01",
        *STACK,
        "--limit",
        "zzz",
        "--skip-verify",
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
        cwd=tmp_path,
        timeout=300,
    )
    bad_request(out, "no host matched")
