"""stack: the installed torch and its CUDA build against the driver, the GPUs and the knowledge base.

The driver decision is `gpuenv.kb.driver_runs_cuda`, the same function `resolve` uses, so a
stack that `resolve` recommends passes here. On a ROCm torch (torch.version.hip) the build's ROCm
release and HIP version, the amdgpu driver, whether the knowledge base knows that release, and
whether each GPU's gfx target is in the build's gfx list. `evaluate` is pure (facts in, findings out).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from gpuenv.adapters import nvml as adapter
from gpuenv.errors import BadRequest
from gpuenv.kb import KnowledgeBase, cubin_runs_on, driver_runs_cuda, load_kb, ptx_runs_on
from gpuenv.platforms.rocm.node import rocm_build
from gpuenv.platforms.rocm.resolve import known_build
from gpuenv.verify.catalogue import finding
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize
from gpuenv.verify.workloads.common import torch_module


def evaluate(facts: dict[str, Any], kb: KnowledgeBase, *, device: str) -> list[Finding]:
    findings: list[Finding] = []
    torch_cuda = facts.get("torch_cuda")
    if device == "cuda" and facts.get("torch_hip"):
        findings += _rocm(facts, kb)
    elif device == "cuda":
        if not torch_cuda:
            return [finding("stack.cpu-only-build", cpu_only_message(facts, kb))]
        findings += _driver(facts, kb, torch_cuda)
        findings += _arches(facts)
        if facts.get("cudnn") is None:
            findings.append(finding("stack.no-cudnn", "cuDNN cannot be loaded by this torch"))
        findings += _nvcc(facts, torch_cuda)
    findings += _knowledge_base(facts, kb)
    return findings


def cpu_only_message(facts: dict[str, Any], kb: KnowledgeBase) -> str:
    """A CPU-only torch on a GPU node, and the wheel index of its release's GPU wheels for this node's CPU
    (PyPI's plain wheel is a CPU build on aarch64 through torch 2.10: the trap this names)."""
    said = f"torch {facts['torch']} is a CPU-only build on a GPU node"
    cpu = str(facts.get("cpu_arch") or "")
    published = kb.for_cpu_arch(cpu)
    version = str(facts["torch"]).split("+")[0]
    release = next((t for t in published.torch if t.version == version), None) if published else None
    if release is None:
        return said
    if not release.builds:
        return f"{said}; torch {version} publishes no CUDA wheels for {cpu}"
    plain = release.default_build in release.builds
    build = release.default_build if plain else release.builds[-1]
    trap = "" if plain else f"; PyPI's plain torch {version} for {cpu} is a CPU build"
    return f"{said}{trap}: its CUDA wheels for {cpu} are on {kb.index_url(build)} ({', '.join(release.builds)})"


def _driver(facts: dict[str, Any], kb: KnowledgeBase, torch_cuda: str) -> list[Finding]:
    driver = facts.get("driver")
    if not driver:
        return [finding("stack.driver-unknown", "the driver version is unknown (NVML did not report it)")]
    try:
        verdict = driver_runs_cuda(kb, driver, torch_cuda)
    except BadRequest:
        message = f"CUDA {torch_cuda} of this torch is not in the knowledge base; driver {driver} not judged"
        return [finding("stack.cuda-not-in-kb", message)]
    if not verdict.ok:
        return [finding("stack.driver-too-old", verdict.message)]
    return [finding("stack.driver-ok", verdict.message)]


ARCH = re.compile(r"^(sm|compute)_(\d+)([a-z]?)$")


def _arch(token: str) -> tuple[str, int, int, str] | None:
    """("sm"|"compute", major, minor, suffix) of an arch-list entry like sm_90, sm_100a, compute_120f."""
    found = ARCH.match(token)
    if not found:
        return None
    number = int(found.group(2))
    return found.group(1), number // 10, number % 10, found.group(3)


def runs_natively(token: str, major: int, minor: int) -> bool:
    """Whether cubins of this entry run on a GPU of compute capability major.minor: compat's
    one rule (same major, a minor no higher: sm_103 runs sm_100 code); `a` variants
    (sm_90a, architecture-specific features) only on their own compute capability."""
    arch = _arch(token)
    if arch is None or arch[0] != "sm":
        return False
    if arch[3] == "a":
        return (arch[1], arch[2]) == (major, minor)
    return cubin_runs_on(f"{arch[1]}.{arch[2]}", f"{major}.{minor}")


def runs_as_ptx(token: str, major: int, minor: int) -> bool:
    """Whether PTX of this entry can be JIT-compiled for major.minor (any later GPU; `a` only its own)."""
    arch = _arch(token)
    if arch is None or arch[0] != "compute":
        return False
    if arch[3] == "a":
        return (arch[1], arch[2]) == (major, minor)
    return ptx_runs_on(f"{arch[1]}.{arch[2]}", f"{major}.{minor}")


def _arches(facts: dict[str, Any]) -> list[Finding]:
    arch_list = facts.get("arch_list") or []
    out = []
    for gpu in facts.get("gpus", []):
        sm = gpu.get("compute_capability")
        if not sm or "." not in sm:
            continue
        major, minor = (int(part) for part in sm.split(".", 1))
        digits = f"{major}{minor}"
        label = f"GPU {gpu.get('cuda_index', gpu.get('index'))} ({gpu.get('name')}, sm_{digits})"
        if any(runs_natively(a, major, minor) for a in arch_list):
            continue  # its own SASS, or a same-major cubin it runs (sm_89 runs sm_86 code)
        ptx = [a for a in arch_list if runs_as_ptx(a, major, minor)]
        if ptx:
            message = (
                f"{label}: no sm_{digits} kernels in this torch build; runs through PTX JIT "
                f"of {ptx[-1]} (slow start, some kernels missing)"
            )
            out.append(finding("stack.ptx-jit", message))
        else:
            message = f"{label} is not supported by this torch build (arch list {' '.join(arch_list) or 'empty'})"
            out.append(finding("stack.arch-unsupported", message))
    return out


def _nvcc(facts: dict[str, Any], torch_cuda: str) -> list[Finding]:
    nvcc = facts.get("nvcc")
    if not nvcc or _major_minor(nvcc) == _major_minor(torch_cuda):
        return []
    message = f"nvcc {nvcc} disagrees with torch's CUDA {torch_cuda}: extensions built here will not match"
    return [finding("stack.nvcc-mismatch", message, cuda=_major_minor(torch_cuda))]


def _rocm(facts: dict[str, Any], kb: KnowledgeBase) -> list[Finding]:
    """A ROCm torch on an AMD node: its ROCm release and HIP version with the amdgpu driver (info),
    the release against the knowledge base, each GPU's gfx target against the build's gfx list."""
    build = rocm_build(facts["torch"], facts["torch_hip"])
    driver = facts.get("amdgpu") or facts.get("driver") or "unknown (neither /sys/module/amdgpu/version nor AMD SMI)"
    said = f"torch {facts['torch']}: ROCm build {build} (HIP {facts['torch_hip']}), amdgpu driver {driver}"
    found = [finding("stack.rocm-build", said)]
    if not known_build(kb, build):
        message = f"ROCm {build.removeprefix('rocm')} of this torch is not in the knowledge base: not cross-checked"
        found.append(finding("stack.rocm-not-in-kb", message))
    gfx_list = _gfx_list(facts, kb, build)
    if gfx_list:
        found += _gfx_unsupported(facts, kb, gfx_list)
    return found


def _gfx_list(facts: dict[str, Any], kb: KnowledgeBase, build: str) -> list[str]:
    """The gfx targets the build carries: as torch says (its arch list), else as the KB says."""
    if facts.get("arch_list"):
        return [_base_gfx(a) for a in facts["arch_list"]]
    row = kb.rocm_builds(facts["torch"].split("+")[0])
    return list(row.arch.get(build, ())) if row else []


def _base_gfx(target: str) -> str:
    """ "gfx942:sramecc+:xnack-" (torch's gcnArchName) is gfx942."""
    return target.split(":")[0].strip().lower()


def _gfx_unsupported(facts: dict[str, Any], kb: KnowledgeBase, gfx_list: list[str]) -> list[Finding]:
    out = []
    for gpu in facts.get("gpus", []):
        known = kb.find_amd_gpu(gpu["name"]) if gpu.get("name") else None
        gfx = _base_gfx(gpu.get("gfx") or (known.gfx if known else ""))
        if not gfx or gfx in gfx_list:
            continue
        label = f"GPU {gpu.get('cuda_index', gpu.get('index'))} ({gpu.get('name')}, {gfx})"
        message = f"{label} is not supported by this torch build (gfx list {' '.join(gfx_list)})"
        out.append(finding("stack.arch-unsupported", message))
    return out


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _knowledge_base(facts: dict[str, Any], kb: KnowledgeBase) -> list[Finding]:
    release = facts["torch"].split("+")[0]
    row = next((t for t in kb.torch if t.version == release), None)
    if row is None:
        return [
            finding(
                "stack.torch-not-in-kb", f"torch {release} is not in the knowledge base: versions not cross-checked"
            )
        ]
    out = []
    vision = facts.get("torchvision")
    if vision and row.torchvision and vision.split("+")[0] != row.torchvision:
        message = f"torchvision {vision} does not match torch {release} (wants {row.torchvision})"
        out.append(finding("stack.torchvision-mismatch", message))
    python = facts.get("python")
    if python and python not in row.python:
        message = f"Python {python} is not a supported Python of torch {release} ({', '.join(row.python)})"
        out.append(finding("stack.python-unsupported", message))
    return out


# ---- facts (runs in the worker) -----------------------------------------------------------


def gather(ctx: CheckContext) -> dict[str, Any]:
    torch = torch_module()

    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_hip": getattr(torch.version, "hip", None),  # None on CUDA builds and on old torch
        "amdgpu": amdgpu_version(),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "cpu_arch": os.uname().machine,  # which wheels the index publishes for this node
        "torchvision": _dist_version("torchvision"),
        "torchaudio": _dist_version("torchaudio"),
        "cudnn": None,
        "nccl": None,
        "arch_list": [],
        "nvcc": nvcc_version(),
        "driver": ctx.host.driver,
        "cuda_driver": ctx.host.cuda_driver,
        "gpus": [asdict(g) for g in ctx.host.gpus],
    }
    if (torch.version.cuda or facts["torch_hip"]) and torch.cuda.is_available():
        cudnn = torch.backends.cudnn  # on ROCm, MIOpen answers here
        facts["cudnn"] = cudnn.version() if torch.version.cuda and cudnn.is_available() else None
        nccl = torch.cuda.nccl.version()
        facts["nccl"] = ".".join(str(v) for v in nccl) if isinstance(nccl, tuple) else str(nccl)
        facts["arch_list"] = list(torch.cuda.get_arch_list())
        if not facts["gpus"]:
            facts["gpus"] = [
                {
                    "cuda_index": i,
                    "name": torch.cuda.get_device_name(i),
                    "compute_capability": "{}.{}".format(*torch.cuda.get_device_capability(i)),
                    "gfx": getattr(torch.cuda.get_device_properties(i), "gcnArchName", None),  # ROCm only
                }
                for i in range(torch.cuda.device_count())
            ]
    if ctx.device == "cuda" and not facts["driver"]:
        facts.update(_driver_from_nvml())
    return facts


def _driver_from_nvml() -> dict[str, Any]:
    if adapter.init():
        return {}
    versions = adapter.driver_versions()
    return {"driver": versions["driver"], "cuda_driver": versions["cuda_driver"]}


AMDGPU_VERSION = Path("/sys/module/amdgpu/version")


def amdgpu_version(path: Path = AMDGPU_VERSION) -> str | None:
    """The amdgpu module's version (AMD's DKMS driver writes it; the kernel's inbox driver does not)."""
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def nvcc_version() -> str | None:
    candidates = [shutil.which("nvcc")]
    if os.environ.get("CUDA_HOME"):
        candidates.append(str(Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"))
    for nvcc in filter(None, candidates):
        try:
            out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=15).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        found = re.search(r"release (\d+\.\d+)", out)
        if found:
            return found.group(1)
    return None


def run(ctx: CheckContext) -> CheckResult:
    facts = gather(ctx)
    ctx.provided["stack"] = {k: v for k, v in facts.items() if k != "gpus"}
    kb = load_kb(Path(ctx.kb) if ctx.kb else None)
    findings = evaluate(facts, kb, device=ctx.device)
    build = f"CUDA {facts['torch_cuda']}" if facts["torch_cuda"] else "CPU build"
    if facts["torch_hip"]:
        build = f"ROCm {rocm_build(facts['torch'], facts['torch_hip']).removeprefix('rocm')}, HIP {facts['torch_hip']}"
    default = f"torch {facts['torch']} ({build}), Python {facts['python']}"
    if ctx.device == "cuda" and facts.get("driver"):
        default += f", driver {facts['driver']}"
    return CheckResult(
        "stack",
        status_from_findings(findings),
        summary=summarize(findings, default),
        metrics={k: facts[k] for k in ("torch", "torch_cuda", "torch_hip", "cudnn", "nccl", "python")},
        findings=findings,
    )
