"""Synthetic fleets of verify reports, built with gpuenv's own report model (gpuenv.verify.model).

Each node's report is a real `Report` (checks, findings from the catalogue, the verdict from
`decide`) holding the figures the checks put in their metrics: per-GPU `{cuda index: value}` for
amp and nvml, the allreduce check's bandwidth table. Healthy spread is a normal distribution cut
at 2.5 standard deviations (healthy hardware stays within its spread); outliers are planted.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuenv.verify import reportfile
from gpuenv.verify.catalogue import finding
from gpuenv.verify.model import CheckResult, Finding, GpuRef, Report, decide

H100 = "NVIDIA H100 80GB HBM3"
MiB = 1 << 20
SIZES = (("allreduce", 128 * MiB), ("allreduce", 512 * MiB), ("allgather", 512 * MiB))
SHAPES = ("4096x4096x4096", "8192x8192x8192")


@dataclass
class Node:
    """One node's figures; tests change them to plant an outlier."""

    host: str
    gpus: int = 8
    model: str = H100
    tflops: dict[int, float] = field(default_factory=dict)
    energy: dict[int, float] = field(default_factory=dict)
    temperature: dict[int, int] = field(default_factory=dict)
    clock: dict[int, int] = field(default_factory=dict)
    busbw: dict[tuple[str, int], float] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def uuid(self, i: int) -> str:
        return f"GPU-{self.host}-{i}"

    def serial(self, i: int) -> str:
        return f"SN-{self.host}-{i}"


def _near(rng: random.Random, centre: float, spread: float) -> float:
    """Normal around centre with relative spread, cut at 2.5 standard deviations."""
    return centre * (1 + max(-2.5, min(2.5, rng.gauss(0, 1))) * spread)


def healthy_node(host: str, rng: random.Random, *, gpus: int = 8, model: str = H100, tflops: float = 700.0) -> Node:
    node = Node(host, gpus, model)
    for i in range(gpus):
        node.tflops[i] = round(_near(rng, tflops, 0.01), 3)
        node.energy[i] = round(_near(rng, 0.9, 0.01), 4)
        node.temperature[i] = round(_near(rng, 36, 0.04))
        node.clock[i] = round(_near(rng, 1980, 0.003))
    for coll, nbytes in SIZES:
        base = 360.0 if coll == "allreduce" else 300.0
        node.busbw[(coll, nbytes)] = round(_near(rng, base * (nbytes / (512 * MiB)) ** 0.05, 0.01), 3)
    return node


def report(node: Node) -> dict[str, Any]:
    """The node's report as `gpuenv verify --json` writes it."""
    gpus = [
        {
            "index": i,
            "cuda_index": i,
            "name": node.model,
            "uuid": node.uuid(i),
            "serial": node.serial(i),
            "pci_bus_id": f"00000000:{0x17 + i:02x}:00.0",
            "compute_capability": "9.0",
        }
        for i in range(node.gpus)
    ]
    nvml_findings = [f for f in node.findings if (f.code or "").startswith("nvml.")]
    checks = [
        CheckResult(
            "nvml",
            "fail" if any(f.severity == "fail" for f in nvml_findings) else "pass",
            metrics={
                "gpus": node.gpus,
                "driver": "570.124.06",
                "temperature_c": {str(i): v for i, v in node.temperature.items()},
                "sm_clock_mhz": {str(i): v for i, v in node.clock.items()},
            },
            findings=nvml_findings,
            detail={"snapshot": _snapshot(node, gpus)},
        ),
        CheckResult("allreduce", "pass", metrics=_allreduce_metrics(node)),
        CheckResult("amp", "pass", metrics=_amp_metrics(node)),
    ]
    verdict = decide(checks, strict=False, cpu_only=False, interrupted=None)
    return Report(
        level="standard",
        device="cuda",
        cpu_only=False,
        started="2026-11-30T15:04:05.000000+00:00",
        finished="2026-11-30T15:06:05.000000+00:00",
        gpuenv_version="0.1.0",
        host={"hostname": node.host, "gpus": gpus, "pci_nvidia": [g["pci_bus_id"] for g in gpus], "pci_scope": "host"},
        stack={},
        checks=checks,
        verdict=verdict,
    ).to_dict()


def typed(doc: dict[str, Any]) -> reportfile.VerifyReport:
    """A report as every reader of report files sees it (gpuenv.verify.reportfile), from its JSON."""
    found = reportfile.decode(json.dumps(doc).encode())
    assert isinstance(found, reportfile.VerifyReport)
    return found


def _snapshot(node: Node, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """The NVML readings the nvml check keeps in its detail (gpuenv.adapters.nvml's shape)."""
    return {
        "driver": "570.124.06",
        "cuda_driver": "12.8",
        "gpus": [
            {
                **{k: g[k] for k in ("index", "name", "uuid", "serial", "pci_bus_id", "compute_capability")},
                "ecc_uncorrected": 0,
                "retired_pages_pending": 0,
                "remapped_rows": {"corrected": 0, "uncorrectable": 0, "pending": False, "failure": False},
                "pcie": {"gen": 5, "under_load": True, "max_gen": 5, "width": 16, "max_width": 16},
                "clock_events": 0,
                "persistence": 1,
                "temperature": node.temperature[g["index"]],
                "slowdown_temperature": 87,
                "nvlink_down": [],
                "processes": [],
                "memory_used_mib": 0,
                "mig": 0,
                "compute_mode": 0,
                "fabric": {"state": 3, "status": 0, "clique": 1},
                "sm_clock_under_load": node.clock[g["index"]],
                "unknown": {},
            }
            for g in gpus
        ],
    }


def _allreduce_metrics(node: Node) -> dict[str, Any]:
    rows = [
        {"collective": c, "bytes": b, "time_us": 1.0, "algbw_gbps": round(v / 1.75, 3), "busbw_gbps": v}
        for (c, b), v in node.busbw.items()
    ]
    head = rows[1] if len(rows) > 1 else rows[0]
    return {"world": node.gpus, "backend": "nccl", "sizes": rows, "headline": head, "busbw_gbps": head["busbw_gbps"]}


def _amp_metrics(node: Node) -> dict[str, Any]:
    per_gpu = {str(i): v for i, v in node.tflops.items()}
    return {
        "matmul_tflops": per_gpu,
        "matmul_tflops_by_shape": {SHAPES[0]: {k: round(v * 0.9, 3) for k, v in per_gpu.items()}, SHAPES[1]: per_gpu},
        "matmul_tflops_min": min(node.tflops.values()),
        "matmul_dtype": "bf16",
        "matmul_shape": SHAPES[1],
        "energy_per_step_j": {str(i): v for i, v in node.energy.items()},
    }


def fleet(n: int, *, seed: int = 1, prefix: str = "gpu", **kwargs: Any) -> list[Node]:
    rng = random.Random(seed)
    return [healthy_node(f"{prefix}{i:04d}", rng, **kwargs) for i in range(n)]


def write(nodes: Iterable[Node], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for node in nodes:
        (folder / f"{node.host}.json").write_text(json.dumps(report(node)))
    return folder


def ecc_failure(node: Node, gpu: int) -> None:
    """Plant an uncorrectable ECC error on one GPU (the nvml check's finding, as the catalogue words it)."""
    ref = GpuRef(gpu, node.uuid(gpu), f"00000000:{0x17 + gpu:02x}:00.0")
    node.findings.append(finding("nvml.ecc_uncorrected", f"GPU {gpu}: 2 uncorrectable ECC error(s)", gpu=ref))
