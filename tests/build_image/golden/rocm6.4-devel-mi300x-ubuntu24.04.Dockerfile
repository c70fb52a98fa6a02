# PyTorch 2.9.1 (rocm6.4) on ROCm 6.4, Python 3.12, ubuntu24.04: devel image.
# Rendered by gpuenv from stack.json; change the stack and render again instead of editing this file.
# Needs AMD's amdgpu kernel driver on the host (amdgpu-6.4); run it with
# --device=/dev/kfd --device=/dev/dri --group-add video (and the group owning /dev/kfd, often render).

ARG BASE_IMAGE=rocm/dev-ubuntu-24.04:6.4-complete

# python-base: the ROCm image plus Python 3.12 and its venv module, a C compiler and Python headers for torch.compile.
FROM ${BASE_IMAGE} AS python-base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates \
      python3.12 \
      python3.12-venv \
      python3.12-dev \
      gcc \
      g++ \
      libc6-dev \
      ninja-build \
 && rm -rf /var/lib/apt/lists/*

# builder: every Python package goes into /opt/venv here; the final stage copies the venv.
FROM python-base AS builder
RUN python3.12 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY requirements.txt constraints.txt /tmp/gpuenv/
# torch 2.9.1 with torchvision 0.24.1, pinned, and numpy<3.
# The ROCm wheels depend on pytorch-triton-rocm, which pip takes from the same index.
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/rocm6.4 -r /tmp/gpuenv/requirements.txt
# gpuenv itself (so that `gpuenv verify` certifies the image) without its dependencies, then those
# and any extra packages, constrained so that the pinned torch is never replaced.
COPY extra-requirements.txt /tmp/gpuenv/
COPY gpuenv-wheel/ /tmp/gpuenv/gpuenv-wheel/
RUN pip install --no-cache-dir --no-deps /tmp/gpuenv/gpuenv-wheel/gpuenv-*.whl \
 && pip install --no-cache-dir -c /tmp/gpuenv/constraints.txt -r /tmp/gpuenv/extra-requirements.txt

FROM python-base AS final
LABEL org.opencontainers.image.title="PyTorch 2.9.1 (rocm6.4) on ROCm 6.4, Python 3.12, ubuntu24.04" \
      org.opencontainers.image.description="devel image rendered by gpuenv" \
      org.opencontainers.image.version="2.9.1-rocm6.4" \
      org.opencontainers.image.base.name="rocm/dev-ubuntu-24.04:6.4-complete" \
      io.gpuenv.schema="gpuenv.stack/2" \
      io.gpuenv.torch="2.9.1" \
      io.gpuenv.torchvision="0.24.1" \
      io.gpuenv.rocm="6.4" \
      io.gpuenv.build="rocm6.4" \
      io.gpuenv.python="3.12" \
      io.gpuenv.os="ubuntu24.04" \
      io.gpuenv.cpu-arch="x86_64" \
      io.gpuenv.numpy="numpy<3" \
      io.gpuenv.driver-branch="amdgpu-6.4" \
      io.gpuenv.gpu-gfx="gfx942" \
      io.gpuenv.arch-list="gfx942" \
      io.gpuenv.index-url="https://download.pytorch.org/whl/rocm6.4" \
      io.gpuenv.flavor="devel" \
      io.gpuenv.stack-file="/opt/gpuenv/stack.json"
RUN groupadd --gid 10001 app \
 && useradd --uid 10001 --gid app --create-home --shell /bin/bash app
COPY --from=builder /opt/venv /opt/venv
COPY stack.json /opt/gpuenv/stack.json
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/opt/rocm/bin:$PATH \
    ROCM_HOME=/opt/rocm \
    ROCM_PATH=/opt/rocm \
    PYTORCH_ROCM_ARCH="gfx942" \
    GPUENV_STACK=/opt/gpuenv/stack.json
WORKDIR /app
USER 10001:10001
CMD ["python"]
