#!/usr/bin/env bash
# Sets gpuenv up in ./.venv and shows what it does on this machine: the stack it would pin for the
# seed scenario (CUDA 11.7), the knowledge base, and a quick
# certification of this node (on a machine without an NVIDIA GPU: the same workloads on the CPU, said so).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -c tests/constraints.txt -e '.[verify]'
export PATH="$PWD/.venv/bin:$PATH"

set -x
gpuenv resolve --cuda 11.7
gpuenv matrix
gpuenv verify --level quick
