# PyTorch 2.9.1 (cu128) on CUDA 12.8.1, Python 3.12, ubuntu24.04: devel image.
# Rendered by gpuenv from stack.json; change the stack and render again instead of editing this file.
# Needs an NVIDIA driver >= 570.124.06 (>= 525.60.13 through minor-version compatibility).

ARG BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04

# python-base: the CUDA image plus Python (the CUDA images carry none), a C compiler and Python headers for torch.compile.
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
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cu128 -r /tmp/gpuenv/requirements.txt
# gpuenv itself (so that `gpuenv verify` certifies the image) without its dependencies, then those
# and any extra packages, constrained so that the pinned torch is never replaced.
COPY extra-requirements.txt /tmp/gpuenv/
COPY gpuenv-wheel/ /tmp/gpuenv/gpuenv-wheel/
RUN pip install --no-cache-dir --no-deps /tmp/gpuenv/gpuenv-wheel/gpuenv-*.whl \
 && pip install --no-cache-dir -c /tmp/gpuenv/constraints.txt -r /tmp/gpuenv/extra-requirements.txt

FROM python-base AS final
LABEL org.opencontainers.image.title="PyTorch 2.9.1 (cu128) on CUDA 12.8.1, Python 3.12, ubuntu24.04" \
      org.opencontainers.image.description="devel image rendered by gpuenv" \
      org.opencontainers.image.version="2.9.1-cu128" \
      org.opencontainers.image.base.name="nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04" \
      io.gpuenv.schema="gpuenv.stack/2" \
      io.gpuenv.torch="2.9.1" \
      io.gpuenv.torchvision="0.24.1" \
      io.gpuenv.cuda="12.8.1" \
      io.gpuenv.build="cu128" \
      io.gpuenv.cudnn="9.8.0.87" \
      io.gpuenv.python="3.12" \
      io.gpuenv.os="ubuntu24.04" \
      io.gpuenv.cpu-arch="aarch64" \
      io.gpuenv.numpy="numpy<3" \
      io.gpuenv.driver-min="570.124.06" \
      io.gpuenv.driver-floor="525.60.13" \
      io.gpuenv.driver-branch="R580" \
      io.gpuenv.gpu-sm="9.0" \
      io.gpuenv.arch-list="9.0" \
      io.gpuenv.index-url="https://download.pytorch.org/whl/cu128" \
      io.gpuenv.flavor="devel" \
      io.gpuenv.stack-file="/opt/gpuenv/stack.json"
RUN groupadd --gid 10001 app \
 && useradd --uid 10001 --gid app --create-home --shell /bin/bash app
COPY --from=builder /opt/venv /opt/venv
COPY stack.json /opt/gpuenv/stack.json
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/cuda/bin:$PATH \
    CUDA_HOME=/usr/local/cuda \
    TORCH_CUDA_ARCH_LIST="9.0" \
    GPUENV_STACK=/opt/gpuenv/stack.json
WORKDIR /app
USER 10001:10001
CMD ["python"]
