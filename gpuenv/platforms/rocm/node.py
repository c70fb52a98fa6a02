"""ROCm's node half: AMD Instinct GPUs, read through AMD SMI, picked by ROCR_VISIBLE_DEVICES and
HIP_VISIBLE_DEVICES; their GPUs are torch's "cuda" device all the same."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuenv.adapters import amdsmi
from gpuenv.platforms.node import GpuNode, Gpus

# Where AMD SMI names no floor (min_power_cap 0, as MI300X gives it), the lowest cap tried is this
# share of the default (375 W of MI300X's 750 W). gpuenv's choice, not AMD's: NVML's floors sit
# near 30-50 % of the default (H100 SXM 200 of 700 W), and a cap far below that starves the NLP
# step rather than measuring an efficient GPU.
FLOOR_SHARE = 0.5


def visible(gpus: Gpus, environ: Mapping[str, str]) -> str | None:
    """The AMD SMI indices this process may use, as a CUDA_VISIBLE_DEVICES-style list for
    gpuenv.verify.facts.visible: ROCR_VISIBLE_DEVICES picks among all GPUs, then HIP_VISIBLE_DEVICES
    (or CUDA_VISIBLE_DEVICES, which HIP also reads) among those, by position or UUID; None: all."""
    specs = [
        environ.get("ROCR_VISIBLE_DEVICES"),
        environ.get("HIP_VISIBLE_DEVICES", environ.get("CUDA_VISIBLE_DEVICES")),
    ]
    if all(spec is None for spec in specs):
        return None
    chosen = list(gpus)
    for spec in specs:
        if spec is not None:
            chosen = _picked(chosen, spec)
    return ",".join(str(g["index"]) for g in chosen)


def _picked(gpus: Gpus, spec: str) -> Gpus:
    picked = []
    for token in filter(None, (t.strip() for t in spec.split(","))):
        uuid = token.removeprefix("GPU-").lower()
        match = next(
            (
                g
                for n, g in enumerate(gpus)
                if (token.isdigit() and n == int(token)) or (g.get("uuid") and str(g["uuid"]).lower().startswith(uuid))
            ),
            None,
        )
        if match is None:
            break  # the runtime stops at the first invalid entry, as CUDA does
        picked.append(match)
    return picked


def torch_build(version: Any) -> str | None:
    """ "ROCm (HIP 6.4.43482)" for a ROCm build of torch (`torch.version`: `hip` set, `cuda` None), else None."""
    hip = getattr(version, "hip", None)
    return f"ROCm (HIP {hip})" if hip else None


def rocm_build(torch_version: str, hip: str) -> str:
    """Pure: the ROCm build of a torch on the node ("2.9.1+rocm6.4" is rocm6.4), else HIP's major.minor."""
    local = torch_version.partition("+")[2]
    return local if local.startswith("rocm") else "rocm" + ".".join(hip.split(".")[:2])


def torch_arch(torch: Any, device: Any) -> str | None:
    """The GPU's gfx target as torch's ROCm build names it (gcnArchName)."""
    return str(getattr(torch.cuda.get_device_properties(device), "gcnArchName", "")) or None


NODE = GpuNode(
    smi="amdsmi",
    library="AMD SMI",
    vendor="AMD",
    management=amdsmi,
    pci_vendor="1002",
    bus_field="pci_amd",
    probe_op="probe-amd",
    watches_xids=False,  # AMD's RAS events are counted in the snapshot, not watched
    driver_lists_gpus=False,  # amdgpu has no list of a container's GPUs
    runtime="ROCm (torch's cuda device)",
    devices_variables="ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES",
    # ROCR_VISIBLE_DEVICES picks among every GPU, then HIP's (or CUDA's, which HIP reads too) among those:
    # verify sets ROCR's alone (AMD SMI's indices, as Slurm's gres numbers them) and removes the others
    job_variables=("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    visible_by_position=True,  # ROCR_VISIBLE_DEVICES counts every GPU
    visible=visible,
    torch_build=torch_build,
    torch_arch=torch_arch,
    list_hint="amd-smi list lists the GPUs with their indices",
    driver_hint="tune power and the health check need the amdgpu driver and a GPU",
    install_hint="tune power and the health check need the amdgpu driver and a GPU",  # AMD SMI's reason says which
    power_hints=("amd-smi static --limit", "amd-smi set -g N -o W"),
    power_floor_share=FLOOR_SHARE,
    energy_counter="energy accumulator",
    policy_overlay="amdsmi-policy.json",  # AMD's remediations, limits and counters under load
)
