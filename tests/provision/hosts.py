"""Real SSH test hosts: sshd chrooted into extracted copies of the cached Debian bookworm rootfs.

Each host gets its own copy, a loopback address and port, a fresh ed25519 host key (entered in a
known_hosts file, so host key checking stays on), /proc and /sys mounted, root reachable with a
throwaway client key, and a `deploy` user who becomes root with `su` and a password. Used by the
pytest fixtures and by bench/bench_provision.py; only the PIDs recorded here are ever stopped.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import free_port

ROOT_PASSWORD = "Provision-Test-Become-7f3a9c"
UNREACHABLE = ("127.0.0.250", 9)  # nothing listens there


@dataclass
class TestHost:
    name: str
    root: Path
    address: str
    port: int
    pid: int = 0
    mounts: list[Path] = field(default_factory=list)

    __test__ = False  # not a pytest test class

    def ini_line(self, key: Path) -> str:
        return (
            f"{self.name} ansible_host={self.address} ansible_port={self.port} "
            f"ansible_ssh_private_key_file={key} ansible_python_interpreter=/usr/bin/python3"
        )


@dataclass
class HostSet:
    workdir: Path
    key: Path
    known_hosts: Path
    hosts: list[TestHost] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """Environment for Ansible against these hosts (no lingering ssh mux processes)."""
        ssh_args = f"-o ControlMaster=no -o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes"
        return {"ANSIBLE_SSH_ARGS": ssh_args, "ANSIBLE_HOST_KEY_CHECKING": "True"}

    def inventory(self, names: list[str] | None = None, *, unreachable: bool = False) -> str:
        chosen = [h for h in self.hosts if names is None or h.name in names]
        lines = ["[gpu]", *(h.ini_line(self.key) for h in chosen)]
        if unreachable:
            address, port = UNREACHABLE
            lines.append(f"ghost ansible_host={address} ansible_port={port} ansible_ssh_private_key_file={self.key}")
        return "\n".join(lines) + "\n"


def available() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "SSH test hosts need root (chroot, mount)"
    if shutil.which("ssh-keygen") is None or shutil.which("ssh") is None:
        return False, "openssh-client is not installed"
    return True, ""


def make_hosts(tar: Path, workdir: Path, names: list[str], *, first_address: int = 21) -> HostSet:
    workdir.mkdir(parents=True, exist_ok=True)
    key = workdir / "id_ed25519"
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuenv-test", "-f", str(key)])
    hosts = HostSet(workdir, key, workdir / "known_hosts")
    try:
        for offset, name in enumerate(names):
            address = f"127.0.0.{first_address + offset}"
            host = TestHost(name, workdir / name, address, free_port(address))
            hosts.hosts.append(host)
            _prepare_root(tar, host, key)
            _start_sshd(host)
        entries = [f"[{h.address}]:{h.port} {_host_key(h)}" for h in hosts.hosts]
        hosts.known_hosts.write_text("\n".join(entries) + "\n")
        for host in hosts.hosts:
            _wait_for_ssh(host, timeout=20)
    except BaseException:
        stop_hosts(hosts)
        raise
    return hosts


UBUNTU_2204_OS_RELEASE = """\
PRETTY_NAME="Ubuntu 22.04.5 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.5 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=jammy
"""


def pretend_ubuntu_2204(host: TestHost) -> None:
    """Make the host say it runs Ubuntu 22.04 (its /etc/os-release), so a run sees two different OSes.

    It stays a Debian bookworm rootfs underneath: apt still reads Debian's archive, whose python3.11,
    python3.11-venv and python3.11-dev carry the names of Ubuntu 22.04's distro packages for Python
    3.11, so a stack resolved for Ubuntu 22.04 with Python 3.11 installs and certifies on it.
    """
    release = host.root / "etc" / "os-release"
    release.unlink()  # a link to ../usr/lib/os-release in Debian
    release.write_text(UBUNTU_2204_OS_RELEASE)


def stop_hosts(hosts: HostSet) -> None:
    """Stop the recorded sshd PIDs, unmount, and remove each copy (only when nothing is mounted)."""
    for host in hosts.hosts:
        if host.pid:
            try:
                os.kill(host.pid, signal.SIGTERM)
                _reap(host.pid, timeout=10)
            except ProcessLookupError:
                pass
        _kill_chrooted(host.root)
        for mount in reversed(host.mounts):
            subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True, timeout=30)
        if not any(os.path.ismount(m) for m in host.mounts):
            shutil.rmtree(host.root, ignore_errors=True)


def _prepare_root(tar: Path, host: TestHost, key: Path) -> None:
    host.root.mkdir(parents=True)
    # tar keeps the device nodes, owners and modes of the rootfs (it is our own cached archive)
    _run(["tar", "-xf", str(tar), "-C", str(host.root), "--numeric-owner"])
    ssh = host.root / "etc" / "ssh"
    for old in ssh.glob("ssh_host_*"):
        old.unlink()
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / "ssh_host_ed25519_key")])
    for home, owner in ((host.root / "root", None), (host.root / "home" / "deploy", "deploy")):
        if owner:
            _run(["chroot", str(host.root), "useradd", "-m", "-s", "/bin/bash", owner])
        (home / ".ssh").mkdir(mode=0o700, parents=True, exist_ok=True)
        (home / ".ssh" / "authorized_keys").write_text(key.with_suffix(".pub").read_text())
        if owner:
            _run(["chroot", str(host.root), "chown", "-R", f"{owner}:{owner}", f"/home/{owner}/.ssh"])
    # root's password is what `deploy` gives to su; deploy's own account has no password but is unlocked
    _run(["chroot", str(host.root), "chpasswd"], stdin=f"root:{ROOT_PASSWORD}\n")
    _run(["chroot", str(host.root), "chpasswd", "-e"], stdin="deploy:*\n")
    (host.root / "run" / "sshd").mkdir(parents=True, exist_ok=True)
    for target, argv in (
        ("proc", ["-t", "proc", "proc"]),
        ("sys", ["-t", "sysfs", "-o", "ro", "sysfs"]),
        ("dev/pts", ["--bind", "/dev/pts"]),
    ):  # su needs a terminal
        mount = host.root / target
        _run(["mount", *argv, str(mount)])
        host.mounts.append(mount)


def _start_sshd(host: TestHost) -> None:
    log = open(host.root.parent / f"{host.name}-sshd.log", "wb")  # noqa: SIM115 - kept open for the daemon
    proc = subprocess.Popen(
        [
            "chroot",
            str(host.root),
            "/usr/sbin/sshd",
            "-D",
            "-e",
            "-p",
            str(host.port),
            "-o",
            f"ListenAddress={host.address}",
            "-o",
            "UsePAM=no",
            "-o",
            "HostKey=/etc/ssh/ssh_host_ed25519_key",
            "-o",
            "MaxStartups=100",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    host.pid = proc.pid


def _host_key(host: TestHost) -> str:
    text = (host.root / "etc" / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()
    return f"{text[0]} {text[1]}"


def _wait_for_ssh(host: TestHost, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            sock.settimeout(1)
            if sock.connect_ex((host.address, host.port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"sshd for {host.name} did not listen on {host.address}:{host.port} within {timeout}s")


def _reap(pid: int, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _kill_chrooted(root: Path) -> None:
    """Processes still running inside this host's copy (left by a test), found by their root link."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.readlink(proc / "root") == str(root):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def _run(argv: list[str], *, stdin: str | None = None) -> None:
    subprocess.run(argv, check=True, capture_output=True, input=stdin, text=True, timeout=60)
