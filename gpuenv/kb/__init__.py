"""The compatibility knowledge base and its refresh.

model: the typed rows; load: reading and checking a file; rules: the pure rules over it (the names callers
use are importable from `gpuenv.kb` itself). `gpuenv kb refresh` proposes a newer file: sources (where the
bytes come from: HTTP with timeouts and retries, a recorded snapshot, or both while recording); derive (the
pure rules that turn upstream data into rows); refresh (the service that merges the rows with the hand-kept
overlay and the current file, diffs and writes the result). The refresh is imported only when run.
"""

from __future__ import annotations

from gpuenv.kb.load import SCHEMA, load_kb, parse_kb
from gpuenv.kb.model import (
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
from gpuenv.kb.rules import (
    STALE_AFTER_DAYS,
    DriverCompat,
    ForwardCompat,
    cubin_runs_on,
    driver_runs_cuda,
    forward_compat,
    gpu_code_for,
    in_cuda_image,
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
    "ForwardCompat",
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
    "forward_compat",
    "gpu_code_for",
    "in_cuda_image",
    "kb_age_days",
    "kb_age_line",
    "load_kb",
    "parse_kb",
    "ptx_runs_on",
    "recommended_branch",
    "staleness_warning",
]
