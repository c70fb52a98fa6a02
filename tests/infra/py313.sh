#!/usr/bin/env bash
# pytest ARGS under Debian 13's Python 3.13: chrooted into the rootfs tests/infra/prepare.sh caches in
# $GPUENV_TEST_CACHE/python3.13, with this checkout mounted at /src, in a mount namespace of the run's
# own (its mounts end with it). Root only. With GPUENV_PY313_SETUP=1 it (re)makes the rootfs's venv
# instead: gpuenv editable over /src with every extra but the torch ones (verify's NVML bindings
# kept), and the test tools.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
ROOT="${GPUENV_TEST_CACHE:?}/python3.13/root"
if [ ! -x "$ROOT/usr/bin/python3.13" ]; then
  echo "no Python 3.13 rootfs in $ROOT: run tests/infra/prepare.sh as root" >&2
  exit 1
fi
if [ "${GPUENV_PY313_SETUP:-}" = 1 ]; then
  inside='rm -rf /opt/venv && python3.13 -m venv /opt/venv &&
    /opt/venv/bin/pip install -q -c /src/tests/constraints.txt -e "/src[docker,ansible,kb,slurm,report,fast,test]" \
      nvidia-ml-py'
else
  inside='cd /src && exec /opt/venv/bin/python -m pytest -p no:cacheprovider "$@"'
fi
# shellcheck disable=SC2016  # expanded by the shell inside the namespace
exec unshare --mount --propagation private sh -c '
  root=$1 repo=$2 inside=$3; shift 3
  mount --bind "$repo" "$root/src" && mount -t proc proc "$root/proc" && mount --rbind /dev "$root/dev"
  mount -t tmpfs tmpfs "$root/tmp"
  exec chroot "$root" /usr/bin/env -i PATH=/opt/venv/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
    PYTHONPATH=/src PYTHONDONTWRITEBYTECODE=1 CI="${CI:-}" /bin/sh -c "$inside" py313 "$@"
' py313 "$ROOT" "$REPO" "$inside" "$@"
