"""Which library sets this node's power limits for `gpuenv tune power`: NVML on an NVIDIA node,
AMD SMI's power cap on an AMD one, behind one face (the functions of gpuenv.adapters.nvml's
power part), with the words each vendor's tools use in a hint.

NVML first; AMD SMI where NVML cannot be used and AMD SMI can (as verify's probe prefers them).
Neither: CannotRun (exit 3) with the reason of the vendor whose GPUs are on the PCI bus, and the
install that vendor needs (never the other's); with no GPU on the bus, that there is nothing to tune.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuenv.adapters import amdsmi
from gpuenv.adapters import nvml as nvml_adapter
from gpuenv.errors import CannotRun
from gpuenv.extras import install_hint
from gpuenv.verify.pci import amd_on_pci, nvidia_on_pci

# Where AMD SMI names no floor (min_power_cap 0, as MI300X gives it), the lowest cap tried is this
# share of the default (375 W of MI300X's 750 W). gpuenv's choice, not AMD's: NVML's floors sit
# near 30-50 % of the default (H100 SXM 200 of 700 W), and a cap far below that starves the NLP
# step rather than measuring an efficient GPU.
AMD_FLOOR_SHARE = 0.5


@dataclass(frozen=True)
class PowerControl:
    library: str  # "NVML" | "AMD SMI"
    smi: str  # "nvml" | "amdsmi": verify's name for it, and the workload's energy reader
    adapter: Any  # gpuenv.adapters.nvml or gpuenv.adapters.amdsmi
    failed: type[Exception]  # what a call that must succeed raises (with a `reason`)
    show_hint: str  # the vendor's command that shows what a GPU allows
    set_hint: str  # the vendor's command that sets one GPU's limit by hand

    def power_limits(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.adapter.power_limits()
        return [_with_floor(g) for g in found] if self.smi == "amdsmi" else found

    def power_limit_mw(self, index: int) -> int:
        return int(self.adapter.power_limit_mw(index))

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None:
        self.adapter.set_power_limit_mw(index, milliwatts)


def _with_floor(gpu: dict[str, Any]) -> dict[str, Any]:
    default = gpu.get("default_mw") or gpu.get("max_mw")
    if gpu.get("min_mw") or not default:
        return gpu
    return {**gpu, "min_mw": round(default * AMD_FLOOR_SHARE)}


NVIDIA = {"show_hint": "nvidia-smi -q -d POWER", "set_hint": "nvidia-smi -i N -pl W"}
AMD = {"show_hint": "amd-smi static --limit", "set_hint": "amd-smi set -g N -o W"}


def open_control() -> PowerControl:
    """The power control of this node's GPUs, initialised; CannotRun where neither library can be used."""
    nvml_problem = nvml_adapter.init()
    if not nvml_problem:
        return PowerControl("NVML", "nvml", nvml_adapter, nvml_adapter.NvmlCallFailed, **NVIDIA)
    amd_problem = amdsmi.init()
    if not amd_problem:
        return PowerControl("AMD SMI", "amdsmi", amdsmi, amdsmi.AmdSmiCallFailed, **AMD)
    if not amdsmi.missing(amd_problem) or amd_on_pci():  # this node's reason is AMD SMI's
        hint = "tune power needs the amdgpu driver and a GPU"
        raise CannotRun(f"AMD SMI cannot be used here: {amd_problem}", hint=hint)
    if nvidia_on_pci():  # an NVIDIA node: NVML's reason, never the other vendor's install
        hint = install_hint("verify") if nvml_problem == nvml_adapter.NOT_INSTALLED else "install the NVIDIA driver"
        raise CannotRun(f"NVML cannot be used here: {nvml_problem}", hint=hint)
    raise CannotRun(
        f"this node has no GPU to tune: none on the PCI bus (NVML: {nvml_problem})",
        hint="run it on a GPU node: it steps GPUs' power limits (--device cpu moves only its workload to the CPU)",
    )
