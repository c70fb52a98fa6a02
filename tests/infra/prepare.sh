#!/usr/bin/env bash
# Slow-to-make test fixtures, cached outside the checkout in $GPUENV_TEST_CACHE:
#   rootfs/bookworm.tar  a Debian bookworm minbase rootfs (python3, venv, sshd): the stand-in base
#                        image for Docker tests and the root of the SSH test hosts
#   wheelhouse/          torch 2.13.0 (CPU), numpy and gpuenv's own dependencies, for air-gapped installs in images and hosts
set -euo pipefail
CACHE="${GPUENV_TEST_CACHE:?}"
MIRROR="${GPUENV_TEST_MIRROR:-http://deb.debian.org/debian}"
mkdir -p "$CACHE/rootfs" "$CACHE/wheelhouse"

if [ ! -s "$CACHE/rootfs/bookworm.tar" ] && command -v debootstrap >/dev/null && [ "$(id -u)" = 0 ]; then
  tmp=$(mktemp -d "$CACHE/rootfs/build.XXXXXX")
  debootstrap --variant=minbase \
    --include=python3,python3-venv,openssh-server,ca-certificates \
    bookworm "$tmp/root" "$MIRROR" >"$tmp/log" 2>&1 || { tail -20 "$tmp/log"; exit 1; }
  rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
  tar -C "$tmp/root" -cf "$tmp/bookworm.tar" .
  mv "$tmp/bookworm.tar" "$CACHE/rootfs/bookworm.tar"
  rm -rf "$tmp"
fi

# torch, numpy and what gpuenv itself needs, so images and hosts install with --no-index; made again
# (adding what is missing) whenever gpuenv's requirements change, e.g. a new base dependency
wanted="torch==2.13.0 numpy $(python -m gpuenv.requirements | tr '\n' ' ')"
if [ "$(cat "$CACHE/wheelhouse.made-for" 2>/dev/null)" != "$wanted" ]; then
  # shellcheck disable=SC2086  # one requirement a word
  pip download -q -d "$CACHE/wheelhouse" -c "$(dirname "$0")/../constraints.txt" $wanted
  printf '%s' "$wanted" >"$CACHE/wheelhouse.made-for"
fi

# Debian's real libnvidia-ml.so.1 (non-free, not installed, only unpacked): with no NVIDIA kernel
# driver loaded, nvmlInit raises DriverNotLoaded, the path `gpuenv verify` must report as such.
NVML_DIR="$CACHE/nvidia/libnvidia-ml1"
if [ ! -d "$NVML_DIR/root" ] && command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null; then
  apt_tmp=$(mktemp -d)
  mkdir -p "$apt_tmp/lists/partial" "$apt_tmp/cache/archives/partial" "$NVML_DIR"
  echo "deb $MIRROR bookworm main non-free" >"$apt_tmp/sources.list"
  apt_opts=(-o Dir::Etc::sourcelist="$apt_tmp/sources.list" -o Dir::Etc::sourceparts=- \
            -o Dir::State::Lists="$apt_tmp/lists" -o Dir::Cache="$apt_tmp/cache" \
            -o APT::Get::List-Cleanup=0 -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  apt-get "${apt_opts[@]}" -qq update
  (cd "$apt_tmp" && apt-get "${apt_opts[@]}" -qq download libnvidia-ml1)
  dpkg-deb -x "$apt_tmp"/libnvidia-ml1_*.deb "$NVML_DIR/root.tmp"
  mv "$NVML_DIR/root.tmp" "$NVML_DIR/root"
  rm -rf "$apt_tmp"
fi

# Debian 13's Python 3.13 (trixie: the newest Python gpuenv claims), in a rootfs of its own with gcc
# (the fake GPU libraries are compiled) and a venv of gpuenv's dependencies and the test tools,
# editable over the checkout tests/infra/py313.sh mounts at /src. No torch: PyPI's torch for 3.13 is a
# multi-GB CUDA build, so `nox -s py313` runs the unit tests not marked torch. The rootfs is made
# again when its package list changes, its venv when pyproject.toml, the constraints or py313.sh do.
PY313="$CACHE/python3.13"
PY313_PACKAGES="python3,python3-venv,ca-certificates,gcc,libc6-dev"
REPO=$(cd "$(dirname "$0")/../.." && pwd)
made_for=$(cat "$REPO/pyproject.toml" "$REPO/tests/constraints.txt" "$REPO/tests/infra/py313.sh" | sha256sum | cut -c1-16)
if [ "$(id -u)" = 0 ] && command -v debootstrap >/dev/null \
    && [ "$(cat "$PY313/made-for" 2>/dev/null)" != "$PY313_PACKAGES $made_for" ]; then
  if [ "$(cat "$PY313/root.made-for" 2>/dev/null)" != "$PY313_PACKAGES" ]; then
    rm -rf "$PY313/root.tmp" "$PY313/root" && mkdir -p "$PY313"
    debootstrap --variant=minbase --include="$PY313_PACKAGES" \
      trixie "$PY313/root.tmp" "$MIRROR" >"$PY313/debootstrap.log" 2>&1 || { tail -20 "$PY313/debootstrap.log"; exit 1; }
    rm -rf "$PY313/root.tmp/var/cache/apt/archives/"*.deb "$PY313/root.tmp/var/lib/apt/lists/"*
    mkdir -p "$PY313/root.tmp/src"
    mv "$PY313/root.tmp" "$PY313/root"
    printf '%s' "$PY313_PACKAGES" >"$PY313/root.made-for"
  fi
  # pip reaches the package index from inside, through this machine's name servers and trust store
  cp /etc/resolv.conf "$PY313/root/etc/resolv.conf"
  cp /etc/ssl/certs/ca-certificates.crt "$PY313/root/etc/ssl/certs/ca-certificates.crt"
  GPUENV_PY313_SETUP=1 bash "$REPO/tests/infra/py313.sh"
  printf '%s' "$PY313_PACKAGES $made_for" >"$PY313/made-for"
fi
