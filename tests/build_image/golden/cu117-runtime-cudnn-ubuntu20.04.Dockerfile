# PyTorch 2.0.1 (cu117) on CUDA 11.7.1, Python 3.10, ubuntu20.04: runtime image.
# Rendered by gpuenv from stack.json; change the stack and render again instead of editing this file.
# Needs an NVIDIA driver >= 515.65.01 (>= 450.80.02 through minor-version compatibility).

ARG BASE_IMAGE=nvidia/cuda:11.7.1-cudnn8-runtime-ubuntu20.04

# python-base: the CUDA image plus Python (the CUDA images carry none), a C compiler and Python headers for torch.compile.
FROM ${BASE_IMAGE} AS python-base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Python 3.10 comes from the deadsnakes PPA: its key is fetched by full fingerprint and
# checked, and apt trusts it for that repository only (signed-by); no script is piped to a shell.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates gnupg dirmngr \
 && GNUPGHOME="$(mktemp -d)" && export GNUPGHOME \
 && gpg --batch --keyserver hkps://keyserver.ubuntu.com --recv-keys F23C5A6CF475977595C89F51BA6932366A755776 \
 && mkdir -p /etc/apt/keyrings \
 && gpg --batch --export F23C5A6CF475977595C89F51BA6932366A755776 > /etc/apt/keyrings/deadsnakes.gpg \
 && gpg --batch --show-keys --with-colons /etc/apt/keyrings/deadsnakes.gpg | grep -q '^fpr:*F23C5A6CF475977595C89F51BA6932366A755776:' \
 && rm -rf "$GNUPGHOME" \
 && echo "deb [signed-by=/etc/apt/keyrings/deadsnakes.gpg] https://ppa.launchpadcontent.net/deadsnakes/ppa/ubuntu focal main" \
      > /etc/apt/sources.list.d/deadsnakes.list \
 && apt-get purge -y --auto-remove gnupg dirmngr \
 && rm -rf /var/lib/apt/lists/*
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates \
      python3.10 \
      python3.10-venv \
      python3.10-dev \
      gcc \
      g++ \
      libc6-dev \
 && rm -rf /var/lib/apt/lists/*

# builder: every Python package goes into /opt/venv here; the final stage copies the venv.
FROM python-base AS builder
RUN python3.10 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY requirements.txt constraints.txt /tmp/gpuenv/
# torch 2.0.1 with torchvision 0.15.2, torchaudio 2.0.2, pinned, and numpy<2.
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cu117 -r /tmp/gpuenv/requirements.txt
# gpuenv itself (so that `gpuenv verify` certifies the image) without its dependencies, then those
# and any extra packages, constrained so that the pinned torch is never replaced.
COPY extra-requirements.txt /tmp/gpuenv/
COPY gpuenv-wheel/ /tmp/gpuenv/gpuenv-wheel/
RUN pip install --no-cache-dir --no-deps /tmp/gpuenv/gpuenv-wheel/gpuenv-*.whl \
 && pip install --no-cache-dir -c /tmp/gpuenv/constraints.txt -r /tmp/gpuenv/extra-requirements.txt

FROM python-base AS final
LABEL org.opencontainers.image.title="PyTorch 2.0.1 (cu117) on CUDA 11.7.1, Python 3.10, ubuntu20.04" \
      org.opencontainers.image.description="runtime image rendered by gpuenv" \
      org.opencontainers.image.version="2.0.1-cu117" \
      org.opencontainers.image.base.name="nvidia/cuda:11.7.1-cudnn8-runtime-ubuntu20.04" \
      io.gpuenv.schema="gpuenv.stack/2" \
      io.gpuenv.torch="2.0.1" \
      io.gpuenv.torchvision="0.15.2" \
      io.gpuenv.torchaudio="2.0.2" \
      io.gpuenv.cuda="11.7.1" \
      io.gpuenv.build="cu117" \
      io.gpuenv.cudnn="8.5.0.96" \
      io.gpuenv.python="3.10" \
      io.gpuenv.os="ubuntu20.04" \
      io.gpuenv.cpu-arch="x86_64" \
      io.gpuenv.numpy="numpy<2" \
      io.gpuenv.driver-min="515.65.01" \
      io.gpuenv.driver-floor="450.80.02" \
      io.gpuenv.driver-branch="R580" \
      io.gpuenv.gpu-sm="any" \
      io.gpuenv.arch-list="3.7;5.0;6.0;7.0;7.5;8.0;8.6" \
      io.gpuenv.index-url="https://download.pytorch.org/whl/cu117" \
      io.gpuenv.flavor="runtime" \
      io.gpuenv.stack-file="/opt/gpuenv/stack.json"
RUN groupadd --gid 10001 app \
 && useradd --uid 10001 --gid app --create-home --shell /bin/bash app
COPY --from=builder /opt/venv /opt/venv
COPY stack.json /opt/gpuenv/stack.json
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    GPUENV_STACK=/opt/gpuenv/stack.json
WORKDIR /app
USER 10001:10001
CMD ["python"]
