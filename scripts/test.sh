#!/usr/bin/env bash
# Runs the whole test suite on a fresh Debian 12 machine: installs what the tests need (system
# packages when run as root, the venv, the cached rootfs, Python 3.13's rootfs and the wheelhouse),
# then lints and tests.
# Services (dockerd, registry, sshd test hosts) are started by the pytest fixtures that need them
# and stopped by PID when the session ends. The checks are noxfile.py's sessions: lint, unit, py313
# (the unit tests under Python 3.13), cpu, integration and gpu (which skips, saying why, without a
# GPU). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

export GPUENV_TEST_CACHE="${GPUENV_TEST_CACHE:-/var/cache/gpuenv-test}"
mkdir -p "$GPUENV_TEST_CACHE"

if [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends \
    docker.io docker-registry debootstrap openssh-client gcc libc6-dev python3-dev \
    iproute2 ca-certificates slurm-wlm munge chromium >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -c tests/constraints.txt -e '.[verify,docker,ansible,onnx,report,fast,test]'
export PATH="$PWD/.venv/bin:$PATH"

bash tests/infra/prepare.sh

# Every session runs even when one fails; nox exits non-zero if any did. gpu goes first so the
# run closes on the summary of the sessions that run here. pytest's "no tests
# selected" (exit 5) counts as success inside the sessions, so an empty marker selection cannot fail CI.
nox --sessions lint gpu unit py313 cpu integration -- "$@"
