"""Real local services for the build tests and the rebuild benchmark: an isolated dockerd, a
Docker registry on 127.0.0.1, and a stand-in base image made from the cached Debian rootfs.

dockerd is started with the isolated recipe of the test-machine notes (no bridge, no iptables,
its own data root and socket), so it leaves the host's network alone. Each service records its
PID and is stopped by that PID only.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import free_port

STANDIN = "gpuenv-standin:bookworm"


@dataclass
class Service:
    name: str
    root: Path
    process: subprocess.Popen[bytes]
    address: str
    cleanup: list[list[str]] = field(default_factory=list)

    def stop(self, timeout: float = 30) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        for command in self.cleanup:
            subprocess.run(command, capture_output=True, timeout=30, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        log = self.root / "log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""


def can_run_dockerd() -> bool:
    return os.geteuid() == 0 and shutil.which("dockerd") is not None


def start_dockerd(*, timeout: float = 60) -> Service:
    """dockerd on its own socket and data root; returns once it answers /_ping."""
    root = Path(tempfile.mkdtemp(prefix="gpuenv-dockerd-"))
    sock = root / "docker.sock"
    command = [
        "dockerd",
        "--storage-driver=overlay2",
        "--bridge=none",
        "--iptables=false",
        "--ip6tables=false",
        "--ip-forward=false",
        "--ip-masq=false",
        f"--data-root={root}/root",
        f"--exec-root={root}/exec",
        f"--pidfile={root}/dockerd.pid",
        f"-H=unix://{sock}",
    ]
    # dockerd takes an open-file-description read lock on its standard input at start (fcntl
    # F_OFD_SETLK). Inherited, that input is the suite's own /dev/null, and the lock would hold
    # /dev/null for every process that shares it, until the last of them exits (an SQLite file opened
    # there waits out its busy timeout). An empty pipe instead: the lock falls on nothing shared.
    with open(root / "log", "wb") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    assert process.stdin is not None
    process.stdin.close()  # dockerd reads end of file, as from /dev/null
    service = Service("dockerd", root, process, f"unix://{sock}", cleanup=[["umount", f"{root}/exec/netns/default"]])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = service.log_tail()
            service.stop()
            raise RuntimeError(f"dockerd exited with {process.returncode}:\n{tail}")
        if sock.exists() and _pings(sock):
            return service
        time.sleep(0.2)
    tail = service.log_tail()
    service.stop()
    raise RuntimeError(f"dockerd did not answer within {timeout} s:\n{tail}")


def _pings(sock: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(2)
            conn.connect(str(sock))
            conn.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            return b"200 OK" in conn.recv(256)
    except OSError:
        return False


def start_registry(*, timeout: float = 30) -> Service:
    """Debian's docker-registry serving plain HTTP on 127.0.0.1 (Docker trusts loopback registries)."""
    root = Path(tempfile.mkdtemp(prefix="gpuenv-registry-"))
    port = free_port()
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root}/data\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
        "log:\n  level: warn\n",
        encoding="utf-8",
    )
    with open(root / "log", "wb") as log:
        process = subprocess.Popen(
            ["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    service = Service("registry", root, process, f"127.0.0.1:{port}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = service.log_tail()
            service.stop()
            raise RuntimeError(f"docker-registry exited with {process.returncode}:\n{tail}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return service
        except OSError:
            time.sleep(0.2)
    service.stop()
    raise RuntimeError(f"docker-registry did not listen within {timeout} s")


def import_standin(docker_host: str, rootfs_tar: Path, name: str = STANDIN) -> str:
    """The stand-in base image: the cached bookworm rootfs, imported (no registry is reachable)."""
    import docker

    client = docker.DockerClient(base_url=docker_host, timeout=300)
    try:
        repository, tag = name.split(":")
        client.api.import_image_from_file(str(rootfs_tar), repository=repository, tag=tag)
        client.api.inspect_image(name)
    finally:
        client.close()
    return name
