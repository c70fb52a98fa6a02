"""Verify reports of AMD Instinct nodes, as `gpuenv verify --json` writes them on an 8x MI300X
node: the GPUs named by AMD SMI (market name, its UUIDs, gfx942, AMD's PCI bus), the nvml check
read through AMD SMI (`smi: amdsmi`, amdgpu's version, the temperatures; no loaded clocks), RCCL's
busbw under torch's "nccl" backend, the amp check's bf16 matmul. Built on fleet_reports' nodes,
with MI300X figures: a mixed fleet whose vendors were compared together would show them as
outliers of each other."""

from __future__ import annotations

import random
from typing import Any

from gpuenv.verify.catalogue import finding
from gpuenv.verify.model import GpuRef
from tests.fleet import fleet_reports as fr

MI300X = "AMD Instinct MI300X"  # AMD SMI's market name, as the fake libamd_smi.so gives it
AMDGPU = "6.10.5"


def amd_bus(i: int) -> str:
    return f"0000:{0x05 + 0x10 * i:02x}:00.0"


def healthy_mi300x(host: str, rng: random.Random, *, gpus: int = 8) -> fr.Node:
    """An MI300X node: 0.86x an H100's matmul (fleet_reports' 700 TFLOP/s centre), 0.83x its
    busbw, 10 °C warmer; its report leaves the clocks under load out (AMD SMI is read at idle)."""
    node = fr.healthy_node(host, rng, gpus=gpus, model=MI300X)
    node.tflops = {i: round(v * 0.86, 3) for i, v in node.tflops.items()}
    node.busbw = {k: round(v * 0.83, 3) for k, v in node.busbw.items()}
    node.temperature = {i: v + 10 for i, v in node.temperature.items()}
    return node


def mi300x_fleet(n: int, *, seed: int = 7, prefix: str = "mi300x-") -> list[fr.Node]:
    rng = random.Random(seed)
    return [healthy_mi300x(f"{prefix}{i:04d}", rng) for i in range(n)]


def uuid(node: fr.Node, i: int) -> str:
    """AMD SMI's UUID form (as the fake library gives it), unique per host."""
    return f"{i:02x}ff74a1-0000-1000-80c6-{sum(node.host.encode()):012x}"


def report(node: fr.Node, *, named: bool = True) -> dict[str, Any]:
    """The node's report; `named=False`: GPUs AMD SMI could not name (market name N/A)."""
    doc = fr.report(node)
    host = doc["host"]
    for g in host["gpus"]:
        i = g["index"]
        g.update(uuid=uuid(node, i), pci_bus_id=amd_bus(i), compute_capability=None, gfx="gfx942")
        g["name"] = g["name"] if named else None
    host.update(
        smi="amdsmi",
        nvml="ok",
        driver=AMDGPU,
        cuda_driver=None,
        pci_nvidia=[],
        pci_amd=[amd_bus(i) for i in range(node.gpus)],
    )
    by_uuid = {node.uuid(i): uuid(node, i) for i in range(node.gpus)}
    for check in doc["checks"]:
        for f in check["findings"]:
            if f.get("gpu"):
                f["gpu"].update(uuid=by_uuid.get(f["gpu"]["uuid"]), pci_bus_id=amd_bus(f["gpu"]["index"]))
        if check["name"] == "nvml":
            check["metrics"] = {
                "gpus": node.gpus,
                "smi": "amdsmi",
                "driver": AMDGPU,
                "temperature_c": {str(i): v for i, v in node.temperature.items()},
            }
            check["detail"] = {"snapshot": {"driver": AMDGPU, "cuda_driver": None, "gpus": host["gpus"]}}
    return doc


def xgmi_down(node: fr.Node, gpu: int) -> None:
    """Plant an XGMI link down on one GPU (the nvml check's finding on AMD: the code NVLink's has)."""
    ref = GpuRef(gpu, node.uuid(gpu), amd_bus(gpu))
    node.findings.append(finding("nvml.nvlink_down", f"GPU {gpu}: XGMI link(s) 2 down", gpu=ref))
