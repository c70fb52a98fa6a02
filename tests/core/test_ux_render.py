"""Rendering says what it assumed and reaches this machine locally: provision's inventory gives
localhost a local connection, --render-only names the OS it rendered for and why; shell completion
offers the knowledge base's GPU and OS names. Through the real CLI."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import run_gpuenv


def test_provision_reaches_localhost_without_ssh(tmp_path: Path) -> None:
    proc = run_gpuenv("provision", "localhost", "127.0.0.1", "gpu01", "--render-only", str(tmp_path / "p"))
    assert proc.returncode == 0, proc.stderr
    hosts = (tmp_path / "p" / "inventory" / "hosts.yml").read_text()
    assert 'ansible_connection: "local"' in hosts.split('"localhost":')[1].split('"127.0.0.1"')[0]
    assert 'ansible_connection: "local"' in hosts.split('"127.0.0.1":')[1].split('"gpu01"')[0]
    assert "ansible_connection" not in hosts.split('"gpu01":')[1]
    # a port means an SSH server there (a container, a chroot, a tunnel): no local connection
    ported = run_gpuenv("provision", "127.0.0.1:2222", "--render-only", str(tmp_path / "q"))
    assert ported.returncode == 0, ported.stderr
    assert "ansible_connection" not in (tmp_path / "q" / "inventory" / "hosts.yml").read_text()


def test_render_only_says_which_os_it_rendered_for_and_why(tmp_path: Path) -> None:
    proc = run_gpuenv("provision", "gpu01", "--render-only", str(tmp_path / "p"))
    assert "OS: ubuntu22.04, the default: --render-only reads no host's facts; give --os for another" in proc.stderr
    given = run_gpuenv("provision", "gpu01", "--os", "debian12", "--render-only", str(tmp_path / "q"))
    assert "OS: debian12 (--os)" in given.stderr
    image = run_gpuenv("build-image", "--cuda", "12.4", "--render-only", str(tmp_path / "i"))
    assert image.returncode == 0, image.stderr
    assert "OS: ubuntu22.04, the default: the image's base, give --os for another" in image.stderr


def _complete(*words: str) -> list[str]:
    env = {
        "COMP_WORDS": " ".join(("gpuenv", *words)),
        "COMP_CWORD": str(len(words)),
        "_GPUENV_COMPLETE": "bash_complete",
    }
    proc = run_gpuenv(env={**os.environ, **env})
    return [line.split(",", 1)[1] for line in proc.stdout.splitlines()]


def test_shell_completion_offers_the_knowledge_bases_gpus_and_oses() -> None:
    assert {"H100", "H200"} <= set(_complete("resolve", "--gpu", "H"))
    assert "sm_90" in _complete("build-image", "--gpu", "sm_9")
    assert _complete("provision", "--os", "ubu") == ["ubuntu20.04", "ubuntu22.04", "ubuntu24.04"]
