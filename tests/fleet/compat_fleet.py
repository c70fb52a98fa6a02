"""Generated fleets for `fleet compat` and `resolve --fleet`: verify reports (fleet_reports' and amd_reports'
nodes) of V100, A100, H100, B200, RTX 5090 and MI300X hosts with drivers from R470 to R580, each report
naming its GPUs' compute capability (or gfx target), its driver, its CPU architecture, OS and Python, as verify
writes them.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, NamedTuple

from tests.fleet import amd_reports
from tests.fleet import fleet_reports as fr


class Spec(NamedTuple):
    host: str
    model: str  # the name NVML (or AMD SMI) gives
    code: str  # compute capability, or a gfx target
    driver: str
    cpu_arch: str | None = "x86_64"
    age_days: float = 1.0
    os: str | None = "ubuntu22.04"  # None: a report of a gpuenv that did not record it (or written in a container)
    python: str | None = "3.10"  # the Python that ran verify: Ubuntu 22.04's own


# The fleet: (hosts, its kind); the verdicts a cu128 torch 2.7 stack gets are in test_compat.py.
FLEET = (
    *(Spec(f"v100-{i:03d}", "Tesla V100-SXM2-32GB", "7.0", "580.65.06") for i in (1, 2)),
    Spec("a100-001", "NVIDIA A100-SXM4-80GB", "8.0", "470.256.02"),  # R470: cannot run CUDA 12
    Spec("a100-002", "NVIDIA A100-SXM4-80GB", "8.0", "535.104.05"),  # R535: minor-version compatibility
    Spec("h100-001", fr.H100, "9.0", "550.54.15"),  # R550: minor-version compatibility
    *(Spec(f"h100-{i:03d}", fr.H100, "9.0", "570.124.06") for i in (2, 3, 4)),
    *(Spec(f"b200-{i:03d}", "NVIDIA B200", "10.0", "580.65.06") for i in (1, 2)),
    Spec("rtx5090-001", "NVIDIA GeForce RTX 5090", "12.0", "575.57.08"),
    Spec("mi300x-001", amd_reports.MI300X, "gfx942", amd_reports.AMDGPU),
)


def report(spec: Spec, now: datetime | None = None, *, gpus: int = 2) -> dict[str, Any]:
    """The host's verify report, started `age_days` before now."""
    rng = random.Random(spec.host)
    amd = spec.code.startswith("gfx")
    node = fr.healthy_node(spec.host, rng, gpus=gpus, model=spec.model)
    doc = amd_reports.report(node) if amd else fr.report(node)
    for gpu in doc["host"]["gpus"]:
        gpu.update({"gfx": spec.code, "compute_capability": None} if amd else {"compute_capability": spec.code})
    for key in ("cpu_arch", "os", "python"):
        doc["host"].pop(key, None)
        if getattr(spec, key):
            doc["host"][key] = getattr(spec, key)
    doc["stack"] = {"driver": spec.driver}
    for check in doc["checks"]:
        if check["name"] == "nvml":
            check["metrics"]["driver"] = spec.driver
    started = (now or datetime.now(timezone.utc)) - timedelta(days=spec.age_days)
    doc["started"] = started.isoformat()
    return doc


def write_fleet(folder: Path, specs: tuple[Spec, ...] = FLEET) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        (folder / f"{spec.host}.json").write_text(json.dumps(report(spec)))
    return folder
