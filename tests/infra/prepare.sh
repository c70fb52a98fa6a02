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

if ! ls "$CACHE/wheelhouse"/torch-2.13.0* "$CACHE/wheelhouse"/rich-* >/dev/null 2>&1; then
  # torch, numpy and what gpuenv itself needs, so images and hosts install with --no-index
  pip download -q -d "$CACHE/wheelhouse" -c "$(dirname "$0")/../constraints.txt" \
    torch==2.13.0 numpy click jinja2 packaging rich nvidia-ml-py
fi
