"""The developer loop: `nox -s lint unit` in a few minutes; scripts/test.sh runs every session.

Sessions run in the current environment (venv_backend "none"): install it once with
`pip install -c tests/constraints.txt -e '.[verify,docker,ansible,onnx,report,fast,test]'`, so nothing reinstalls torch.
Tests are chosen by marker: cpu (real PyTorch on the CPU), integration (root, Docker, SSH hosts,
network), gpu; unit is everything else. Extra arguments after `--` go to pytest.
"""

from __future__ import annotations

import glob

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "unit"]

UNIT = "not cpu and not integration and not gpu"
# Python 3.10, the oldest requires-python admits: a construct of a later Python fails lint
VERMIN = ("vermin", "--target=3.10-", "--no-tips", "--violations", "--eval-annotations")
NO_TESTS = 5  # pytest's exit code when a selection holds no tests: not a failure here


def _pytest(session: nox.Session, marker: str, *options: str) -> None:
    session.run("pytest", "-m", marker, *options, *session.posargs, success_codes=[0, NO_TESTS])


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, ruff format, mypy (strict), vulture, ansible-lint (production) and hadolint."""
    session.run("ruff", "check", "gpuenv", "tests", "bench", "noxfile.py")
    session.run("ruff", "format", "--check", "gpuenv", "tests", "bench", "noxfile.py")
    session.run("mypy")
    session.run(*VERMIN, "gpuenv", "tests", "bench", "noxfile.py")
    session.run("vulture")
    session.run("ansible-lint", "--offline", "--strict", "--profile", "production", "playbooks")  # warnings fail too
    session.run("hadolint", "--config", ".hadolint.yaml", *sorted(glob.glob("images/*.Dockerfile")))


@nox.session
def unit(session: nox.Session) -> None:
    """The pure core, rendering, the evaluation halves: no root, Docker, network or torch processes.
    Many tests run gpuenv or ansible-inventory as a child process and wait: one pytest worker per core."""
    _pytest(session, UNIT, "-n", "auto")


@nox.session
def py313(session: nox.Session) -> None:
    """The unit tests that need no torch, under Debian 13's Python 3.13 (root: the rootfs
    tests/infra/prepare.sh caches; tests/infra/py313.sh runs pytest chrooted into it)."""
    pytest = ("bash", "tests/infra/py313.sh", "-m", f"{UNIT} and not torch", "-n", "auto")
    session.run(*pytest, *session.posargs, success_codes=[0, NO_TESTS])


@nox.session
def cpu(session: nox.Session) -> None:
    """gpuenv verify's real PyTorch workloads on the CPU (gloo)."""
    _pytest(session, "cpu and not integration and not gpu")


@nox.session
def integration(session: nox.Session) -> None:
    """A real Docker engine and registry, SSH test hosts, packaging (root; the cached fixtures)."""
    _pytest(session, "integration and not gpu")


@nox.session
def gpu(session: nox.Session) -> None:
    """Needs an NVIDIA GPU; on a machine without one every test skips and says why."""
    _pytest(session, "gpu")
