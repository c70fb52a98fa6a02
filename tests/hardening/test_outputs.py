"""Every output flag follows one rule (gpuenv.files): atomic for files, written through for streams,
refused for directories, block devices and sockets; checked before the first check runs."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import run_gpuenv
from tests.verify.conftest import scenario_env

FLAGS = ("--report", "--junit", "--prometheus")


def verify(lib: Path, *args: str, scenario: str = "healthy-8xh100") -> subprocess.CompletedProcess[str]:
    return run_gpuenv("verify", "--check", "nvml", *args, env=scenario_env(lib, scenario))


@pytest.mark.parametrize("flag", FLAGS)
def test_a_character_device_is_written_through_not_replaced(
    as_root: None, fake_nvml_dir: Path, tmp_path: Path, flag: str
) -> None:
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is, in a temporary folder
    out = verify(fake_nvml_dir, flag, str(null))
    assert out.returncode == 0, out.stderr
    assert stat.S_ISCHR(null.stat().st_mode) and null.stat().st_rdev == os.makedev(1, 3)


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("kind", ["block device", "directory", "socket"])
def test_a_directory_block_device_or_socket_is_refused_before_any_check(
    as_root: None, fake_nvml_dir: Path, tmp_path: Path, flag: str, kind: str
) -> None:
    target = tmp_path / "target"
    keep = None
    if kind == "block device":
        os.mknod(target, 0o660 | stat.S_IFBLK, os.makedev(7, 0))
    elif kind == "directory":
        target.mkdir()
    else:
        keep = socket.socket(socket.AF_UNIX)
        keep.bind(str(target))
    before = target.lstat()
    out = verify(fake_nvml_dir, flag, str(target))
    assert out.returncode == 2 and f"is a {kind}" in out.stderr, out.stderr
    assert "nvml" not in out.stderr  # no check ran
    after = target.lstat()
    assert (after.st_ino, stat.S_IFMT(after.st_mode)) == (before.st_ino, stat.S_IFMT(before.st_mode))
    if keep is not None:
        keep.close()


def test_a_fifo_receives_the_report(fake_nvml_dir: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    out = verify(fake_nvml_dir, "--report", str(fifo))
    reader.join(30)
    assert out.returncode == 0, out.stderr
    assert json.loads(received[0])["verdict"]["certified"] is True
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_dev_stdout_receives_the_report(fake_nvml_dir: Path) -> None:
    out = run_gpuenv(
        "-q", "verify", "--check", "nvml", "--report", "/dev/stdout", env=scenario_env(fake_nvml_dir, "healthy-8xh100")
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["verdict"]["certified"] is True


def test_dev_stdout_into_a_file_appends_and_keeps_the_file(fake_nvml_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text("earlier line\n")
    inode = log.stat().st_ino
    with log.open("a") as handle:
        proc = subprocess.run(
            [sys.executable, "-m", "gpuenv", "-q", "verify", "--check", "nvml", "--report", "/dev/stdout"],
            stdout=handle,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env={**os.environ, **scenario_env(fake_nvml_dir, "healthy-8xh100")},
        )
    assert proc.returncode == 0, proc.stderr
    assert log.stat().st_ino == inode
    text = log.read_text()
    assert text.startswith("earlier line\n") and json.loads(text.split("\n", 1)[1])["verdict"]["certified"]


def test_dash_is_stdout_and_the_table_moves_to_stderr(fake_nvml_dir: Path) -> None:
    out = verify(fake_nvml_dir, "--junit", "-")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith('<?xml version="1.0"') and "gpuenv verify" in out.stderr


@pytest.mark.parametrize("args", [("--report", "-", "--json"), ("--report", "-", "--prometheus", "-")])
def test_two_things_on_stdout_is_a_bad_request(fake_nvml_dir: Path, args: tuple[str, ...]) -> None:
    out = verify(fake_nvml_dir, *args)
    assert out.returncode == 2 and "standard output" in out.stderr


def test_a_regular_file_is_replaced_atomically(fake_nvml_dir: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    report.write_text("old")
    inode = report.stat().st_ino
    assert verify(fake_nvml_dir, "--report", str(report)).returncode == 0
    assert report.stat().st_ino != inode and json.loads(report.read_text())["verdict"]["certified"]
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left behind


def test_a_symlink_is_followed_and_kept(fake_nvml_dir: Path, tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert verify(fake_nvml_dir, "--report", str(link)).returncode == 0
    assert link.is_symlink() and json.loads(real.read_text())["verdict"]["certified"]


def test_another_users_symlink_in_a_sticky_folder_is_refused(
    as_root: None, fake_nvml_dir: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = shared / "report.json"
    link.symlink_to(victim)
    os.lchown(link, 65534, 65534)  # planted by nobody
    out = verify(fake_nvml_dir, "--report", str(link))
    assert out.returncode == 2 and "symlink owned by another user" in out.stderr
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("flag", FLAGS)
def test_an_unwritable_output_is_exit_2_before_any_check(fake_nvml_dir: Path, tmp_path: Path, flag: str) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    os.chmod(folder, 0o500)
    target = "/sys/r.json" if os.geteuid() == 0 else str(folder / "r.json")
    out = verify(fake_nvml_dir, "--report", str(tmp_path / "ok.json"), flag, target)
    assert out.returncode == 2 and "cannot write in" in out.stderr, out.stderr
    assert "nvml" not in out.stderr and not (tmp_path / "ok.json").exists()


@pytest.mark.parametrize(("scenario", "code"), [("healthy-8xh100", 3), ("xid", 1)])
def test_a_write_that_fails_at_the_end_still_shows_the_verdict(
    fake_nvml_dir: Path, tmp_path: Path, scenario: str, code: int
) -> None:
    fifo = tmp_path / "nobody-reads.fifo"  # writable at the start; at the end no reader: ENXIO
    os.mkfifo(fifo)
    report = tmp_path / "r.json"
    out = verify(fake_nvml_dir, "--report", str(report), "--junit", str(fifo), scenario=scenario)
    assert out.returncode == code, out.stderr
    assert f"--junit {fifo} was not written" in out.stderr
    assert "check" in out.stdout and ("certified" in out.stdout or "NOT" in out.stdout.upper())
    assert json.loads(report.read_text())["verdict"]["exit_code"] in (0, 1)
