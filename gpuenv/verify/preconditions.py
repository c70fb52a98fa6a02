"""What a run needs before its checks can say anything, and the checks skipped, naming it, where it
is missing (as dcgmi diag skips the tests after a failed deployment test): one cause makes one
failure, never the same failure again from every check after it. Pure: facts and results in.

- A GPU, for a run on the GPUs (`--device cuda`): where none is on the PCI bus and the management
  library names none, the run's own result fails (verify.no-gpu) and every check is skipped.
- torch able to run the workloads: once a check finds it cannot be imported, or cannot use the GPUs
  (a CPU-only build on a GPU node, CUDA unusable), the checks after it that need torch are skipped.
"""

from __future__ import annotations

from gpuenv.verify.facts import SMI_NAMES, HostFacts, gpu_node_note
from gpuenv.verify.model import CheckResult

# the findings that say torch cannot run a workload here, whichever check found it (a module that
# cannot be imported, verify.import-failed, is torch's only when the result's detail names torch)
TORCH_UNUSABLE = frozenset({"stack.cpu-only-build", "verify.cuda-unusable"})
IMPORT_FAILED = "import_failed"  # a result's detail key: the (top-level) module its check could not import


def missing_gpu(device: str, host: HostFacts) -> str | None:
    """Why a run on the GPUs has none to run on, or None."""
    if device != "cuda" or gpu_node_note(host):
        return None
    return f"--device cuda, but this node has no GPU: none on the PCI bus, {SMI_NAMES[host.smi]}: {host.nvml}"


def torch_unusable(result: CheckResult) -> str | None:
    """Why the checks after this result cannot run torch's workloads, or None."""
    if result.detail.get(IMPORT_FAILED) == "torch" or {f.code for f in result.findings} & TORCH_UNUSABLE:
        return f"{result.name} found that torch cannot run here"
    return None


def skipped(name: str, why: str) -> CheckResult:
    return CheckResult(name, "skip", summary=f"not run: {why}", detail={"precondition": why})
