"""The compatibility knowledge base: its typed rows (model), loading and checking a file (load), and
the pure rules over it (rules). The names callers use are importable from `gpuenv.compat` itself.
"""

from __future__ import annotations

from gpuenv.compat.load import SCHEMA, load_kb, parse_kb
from gpuenv.compat.model import (
    AmdGpu,
    AnsibleNames,
    Architecture,
    ArchList,
    CudaOnArch,
    CudaRelease,
    DriverBranch,
    Gpu,
    KnowledgeBase,
    OsInfo,
    PciDevice,
    Provenance,
    RocmRelease,
    SchemaError,
    TorchOnArch,
    TorchRelease,
    TorchRocm,
    V,
)
from gpuenv.compat.rules import (
    STALE_AFTER_DAYS,
    DriverCompat,
    cubin_runs_on,
    driver_runs_cuda,
    gpu_code_for,
    kb_age_days,
    kb_age_line,
    ptx_runs_on,
    recommended_branch,
    staleness_warning,
)

__all__ = [
    "SCHEMA",
    "STALE_AFTER_DAYS",
    "AmdGpu",
    "AnsibleNames",
    "ArchList",
    "Architecture",
    "CudaOnArch",
    "CudaRelease",
    "DriverBranch",
    "DriverCompat",
    "Gpu",
    "KnowledgeBase",
    "OsInfo",
    "PciDevice",
    "Provenance",
    "RocmRelease",
    "SchemaError",
    "TorchOnArch",
    "TorchRelease",
    "TorchRocm",
    "V",
    "cubin_runs_on",
    "driver_runs_cuda",
    "gpu_code_for",
    "kb_age_days",
    "kb_age_line",
    "load_kb",
    "parse_kb",
    "ptx_runs_on",
    "recommended_branch",
    "staleness_warning",
]
