"""How a container is handed the host's GPUs: NVIDIA's device request, or AMD's device nodes.

A CUDA image asks Docker for every GPU through the NVIDIA Container Toolkit (a DeviceRequest). A ROCm
image needs no toolkit: it is given the ROCm compute interface (/dev/kfd) and the GPUs' DRM nodes
(/dev/dri), with the groups that may open them, as AMD documents for `docker run`. Pure but for
reading this machine's /dev; the Docker adapter passes the keywords to containers.create().
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROCM = "rocm"
ROCM_DEVICES = ("/dev/kfd", "/dev/dri")  # the ROCm compute interface and every GPU's DRM card and render node
ROCM_GROUPS = ("video",)  # the group AMD's instructions add; the groups owning the device nodes are added by number
SHM_SIZE = "8g"  # as AMD's `docker run` examples: RCCL and DataLoader workers share memory through /dev/shm
LABEL_ROCM = "io.gpuenv.rocm"  # set on the images gpuenv renders for a ROCm stack (the ROCm release)
LABEL_BUILD = "io.gpuenv.build"  # torch's wheel build on every image gpuenv renders: "cu128", "rocm6.4", "cpu"
LABEL_BUILD_V1 = "io.gpuenv.cuda-build"  # its name on images of stack schema /1
# What the daemon says when it cannot hand out GPUs: no NVIDIA runtime, or (a daemon elsewhere) no AMD device nodes.
NO_GPU_RUNTIME = (
    "could not select device driver",
    "unknown or invalid runtime name: nvidia",
    "nvidia-container-cli",
    "error gathering device information",
)
NO_KFD = "no /dev/kfd: the amdgpu kernel driver is not loaded"
NO_GPU_HINTS = {
    ROCM: "load the amdgpu driver (gpuenv provision installs it) so that /dev/kfd exists, or use --device cpu",
    "cuda": "install the NVIDIA Container Toolkit and restart Docker, or use --device cpu",
}
RUN_BY_HAND = {
    ROCM: "docker run --rm --device=/dev/kfd --device=/dev/dri --group-add video IMAGE gpuenv verify",
    "cuda": "docker run --rm --gpus all IMAGE gpuenv verify",
}


def platform_of(labels: Mapping[str, str]) -> str:
    """ "rocm" for an image gpuenv rendered for a ROCm stack, else "cuda" (how GPUs were always asked for)."""
    build = labels.get(LABEL_BUILD) or labels.get(LABEL_BUILD_V1, "")
    if labels.get(LABEL_ROCM) or build.startswith(ROCM):
        return ROCM
    return "cuda"


def no_gpu_reason(message: str) -> str | None:
    """Which of NO_GPU_RUNTIME a Docker error says, or None when it is some other failure."""
    return next((s for s in NO_GPU_RUNTIME if s in message.lower()), None)


def no_gpu_hint(platform: str) -> str:
    """What to do on a host that cannot give containers GPUs (a CPU stack's image asks as a CUDA one does)."""
    return NO_GPU_HINTS.get(platform, NO_GPU_HINTS["cuda"])


def short_reason(message: str) -> str:
    """The words of a no-GPU message worth repeating in a note."""
    return no_gpu_reason(message) or message


def device_groups_of_daemon() -> tuple[int, ...] | None:
    """amd_device_groups() where the daemon runs on this machine; for a daemon elsewhere (DOCKER_HOST tcp://
    or ssh://) this machine's /dev says nothing: no groups by number, and the daemon reports missing nodes."""
    if os.environ.get("DOCKER_HOST", "").startswith(("tcp://", "ssh://")):
        return ()
    return amd_device_groups()


def amd_device_groups(dev: Path = Path("/dev")) -> tuple[int, ...] | None:
    """The groups owning this machine's /dev/kfd and DRM render nodes (root's left out); None without /dev/kfd.

    The image runs as a non-root user, so it must be in the group that owns the nodes on the host:
    "render" on most distributions, whose number differs from host to host and from the image's.
    """
    kfd = dev / "kfd"
    if not kfd.exists():
        return None
    nodes = [kfd, *sorted((dev / "dri").glob("renderD*"))]
    return tuple(sorted({node.stat().st_gid for node in nodes} - {0}))


def gpu_run_options(platform: str, *, device_groups: tuple[int, ...] = ()) -> dict[str, Any]:
    """containers.create() keywords that give a container every GPU of the host, with the host's IPC namespace."""
    if platform == ROCM:
        groups = list(dict.fromkeys([*ROCM_GROUPS, *map(str, device_groups)]))
        return {"devices": list(ROCM_DEVICES), "group_add": groups, "ipc_mode": "host", "shm_size": SHM_SIZE}
    import docker.types  # the Docker SDK (extra docker): only NVIDIA's device request needs its type

    return {"device_requests": [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])], "ipc_mode": "host"}
