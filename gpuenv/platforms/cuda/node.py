"""CUDA's node half: NVIDIA GPUs, read through NVML, picked by CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuenv.adapters import nvml
from gpuenv.extras import install_hint
from gpuenv.platforms.node import GpuNode, Gpus


def visible(gpus: Gpus, environ: Mapping[str, str]) -> str | None:
    """CUDA_VISIBLE_DEVICES as it is: NVML's indices or UUIDs (None: every GPU)."""
    return environ.get("CUDA_VISIBLE_DEVICES")


def torch_build(version: Any) -> str | None:
    """ "CUDA 12.8" for a CUDA build of torch (`torch.version`), else None."""
    cuda = getattr(version, "cuda", None)
    return f"CUDA {cuda}" if cuda else None


def torch_arch(torch: Any, device: Any) -> str | None:
    """The GPU's code beside its compute capability: none on NVIDIA (the capability is the code)."""
    return None


NODE = GpuNode(
    smi="nvml",
    library="NVML",
    vendor="NVIDIA",
    management=nvml,
    pci_vendor="10de",
    bus_field="pci_nvidia",
    probe_op="probe",
    watches_xids=True,
    driver_lists_gpus=True,
    runtime="CUDA",
    devices_variables="CUDA_VISIBLE_DEVICES",
    job_variables=("CUDA_VISIBLE_DEVICES",),
    visible_by_position=False,
    visible=visible,
    torch_build=torch_build,
    torch_arch=torch_arch,
    list_hint="nvidia-smi -L lists the GPUs with their indices",
    driver_hint="install the NVIDIA driver",
    install_hint=install_hint("verify"),
    power_hints=("nvidia-smi -q -d POWER", "nvidia-smi -i N -pl W"),
    power_floor_share=None,  # NVML names each GPU's floor
    energy_counter="total-energy counter",
    policy_overlay=None,  # the health policy (nvml-policy.json) is written in NVML's words
)
