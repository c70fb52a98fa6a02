"""The pure rules over the knowledge base: which driver runs which CUDA, which GPU code runs on
which device, and how old the facts are. Resolve and verify share them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Literal

from gpuenv.errors import BadRequest
from gpuenv.kb.model import (
    ArchList,
    CudaRelease,
    DriverBranch,
    Gpu,
    KnowledgeBase,
)

STALE_AFTER_DAYS = 90


# --- driver ↔ CUDA: the one rule, shared by resolve and verify --------------------------------


@dataclass(frozen=True)
class DriverCompat:
    ok: bool
    mode: Literal["native", "minor-version", "no"]
    message: str


def driver_runs_cuda(kb: KnowledgeBase, driver: str, cuda: str) -> DriverCompat:
    """Whether an NVIDIA driver runs code built with a CUDA version.

    native: the driver is at least the toolkit's bundled driver. minor-version: older, but at or
    above the minor-version-compatibility floor of that CUDA major (works, except code needing
    PTX JIT of newer PTX). A driver given as a branch only ("580") is compared by branch.
    """
    row = _cuda_row(kb, cuda)
    have = _driver_key(driver)
    if have >= _driver_key(row.bundled_driver, like=driver):
        message = f"driver {driver} ≥ {row.bundled_driver}, bundled with CUDA {row.toolkit}"
        return DriverCompat(True, "native", message)
    if have >= _driver_key(row.minor_compat_floor, like=driver):
        return DriverCompat(
            True,
            "minor-version",
            f"driver {driver} is older than CUDA {row.toolkit}'s bundled {row.bundled_driver} but at or above "
            f"the minor-version-compatibility floor {row.minor_compat_floor}: runs, except code that needs PTX JIT",
        )
    floor = row.minor_compat_floor
    message = f"driver {driver} is below {floor}, the lowest driver that runs CUDA {row.version}"
    return DriverCompat(False, "no", message)


@dataclass(frozen=True)
class ForwardCompat:
    """Whether NVIDIA's cuda-compat-X-Y package runs a CUDA release on a driver older than the release's own."""

    mode: Literal["not-needed", "compat", "no"]  # not-needed: the driver runs it natively
    package: str  # "cuda-compat-12-8"
    message: str
    datacenter: bool  # the GPU is a data center GPU, the only kind forward compatibility serves
    image_unconfirmed: bool = False  # whether the release's nvidia/cuda images admit the branch was not read


def forward_compat(kb: KnowledgeBase, cuda: str, driver: str, gpu: Gpu | None) -> ForwardCompat:
    """CUDA forward compatibility, as NVIDIA's compatibility guide gives it: on a data center GPU (never a GeForce or
    RTX workstation card), on a driver branch the release's cuda-compat package is listed for (end-of-life and other
    branches are not), for a driver older than the release's bundled one. It also lifts minor-version
    compatibility's PTX JIT limit; CUDA alone is newer (no OpenGL/Vulkan interop)."""
    row = _cuda_row(kb, cuda)
    package, datacenter = row.compat_package, bool(gpu and gpu.datacenter)
    if driver_runs_cuda(kb, driver, cuda).mode == "native":
        return ForwardCompat("not-needed", package, f"driver {driver} runs CUDA {row.version} natively", datacenter)
    branch = f"R{driver.split('.')[0]}"
    served = row.forward_compat or ()
    if gpu is None or not gpu.datacenter:
        named = f"the {gpu.name}" if gpu else "a GPU whose model is not known"
        why = f"{package} does not serve {named}: forward compatibility is for NVIDIA data center GPUs only"
        return ForwardCompat("no", package, why + " (elsewhere CUDA fails with error 804)", datacenter)
    if branch not in served:
        listed = f"it serves {', '.join(served)}" if served else "NVIDIA lists no branch for it"
        return ForwardCompat("no", package, f"{package} does not serve {branch} ({listed})", datacenter)
    message = f"{package} runs CUDA {row.toolkit} on {branch} on the data center {gpu.name} (no OpenGL/Vulkan interop)"
    if "datacenter" in gpu.unconfirmed:
        message += f"; unconfirmed: the {gpu.name} being a data center GPU (source datacenter-gpus)"
    image = "forward_compat:image" in row.provenance.unconfirmed
    return ForwardCompat("compat", package, message, datacenter, image_unconfirmed=image)


def in_cuda_image(compat: ForwardCompat) -> tuple[Literal["caveat", "no"], str] | None:
    """How an image based on nvidia/cuda fares on a driver older than its CUDA's: the base installs cuda-compat-X-Y,
    which NVIDIA's container toolkit loads whenever it is newer than the host's driver, and its NVIDIA_REQUIRE_CUDA
    admits no GeForce on an older driver. None: as the driver alone decides (native, or a data center GPU
    on a branch the package does not serve, which minor-version compatibility may still run)."""
    if compat.mode == "compat":
        doubt = "; unconfirmed: its NVIDIA_REQUIRE_CUDA admitting the branch" if compat.image_unconfirmed else ""
        carried = "runs through CUDA forward compatibility, its nvidia/cuda base carrying it"
        return "caveat", f"{carried}: {compat.message}{doubt}"
    if compat.mode == "no" and not compat.datacenter:
        loaded = f"its nvidia/cuda base carries {compat.package}, loaded for a driver older than CUDA's"
        return "no", f"{loaded}: {compat.message}"
    return None


def _cuda_row(kb: KnowledgeBase, cuda: str) -> CudaRelease:
    row = kb.find_cuda(cuda)
    if row is None:
        raise BadRequest(f"unknown CUDA version {cuda}", hint=f"known: {', '.join(c.version for c in kb.cuda)}")
    return row


def _driver_key(driver: str, like: str | None = None) -> tuple[int, ...]:
    """Driver version as a tuple; compared by branch only when `like` (or itself) is a bare branch."""
    parts = tuple(int(p) for p in driver.split("."))
    if like is not None and "." not in like:
        return parts[:1]
    return parts


def recommended_branch(kb: KnowledgeBase, cuda: CudaRelease) -> DriverBranch:
    """The newest LTS branch that runs the CUDA natively, else the lowest production branch that
    does (datacenter fleets avoid new-feature branches), else the lowest newer branch."""
    bundled_major = int(cuda.bundled_driver.split(".")[0])
    native = [b for b in kb.driver_branches if b.major >= bundled_major]
    lts = [b for b in native if b.lts]
    if lts:
        return max(lts, key=lambda b: b.major)
    if not native:
        raise BadRequest(f"no known driver branch runs CUDA {cuda.toolkit}", hint="update the knowledge base")
    production = [b for b in native if b.kind == "production"]
    return min(production or native, key=lambda b: b.major)


# --- GPU code ↔ device: the one rule ------------------------------------------------------------


def _cc(sm: str) -> tuple[int, int]:
    major, minor = sm.split(".")
    return int(major), int(minor)


def cubin_runs_on(cubin: str, device: str) -> bool:
    """Whether SASS built for compute capability `cubin` runs on a `device` (both "X.Y").

    A cubin for X.Y runs on X.Z for Z >= Y (same major only): sm_89 runs sm_86 cubins, sm_103 runs
    sm_100 cubins, but sm_90 does not run sm_80 cubins.
    """
    (cmajor, cminor), (dmajor, dminor) = _cc(cubin), _cc(device)
    return cmajor == dmajor and dminor >= cminor


def ptx_runs_on(ptx: str, device: str) -> bool:
    """PTX for X.Y is JIT-compiled by the driver for any device of compute capability >= X.Y."""
    return _cc(device) >= _cc(ptx)


def gpu_code_for(arch: ArchList, device: str) -> Literal["sass", "ptx"] | None:
    """How a build's GPU code reaches a device: its own SASS, PTX JIT, or not at all (None)."""
    if any(cubin_runs_on(sm, device) for sm in arch.sass):
        return "sass"
    if any(ptx_runs_on(sm, device) for sm in arch.ptx):
        return "ptx"
    return None


# --- staleness ----------------------------------------------------------------------------


def kb_age_days(kb: KnowledgeBase, today: date) -> int:
    return (today - date.fromisoformat(kb.generated)).days


def kb_age_line(kb: KnowledgeBase, today: date) -> str:
    age = kb_age_days(kb, today)
    return f"knowledge base: {kb.origin}, generated {kb.generated} ({age} day{'' if age == 1 else 's'} old)"


def staleness_warning(kb: KnowledgeBase, today: date) -> str | None:
    """A warning once the knowledge base is older than STALE_AFTER_DAYS, else None."""
    age = kb_age_days(kb, today)
    if age <= STALE_AFTER_DAYS:
        return None
    return (
        f"the knowledge base was generated on {kb.generated}, {age} days ago (over {STALE_AFTER_DAYS}): "
        "newer torch, CUDA and driver releases are unknown to it; update gpuenv or give a newer file with --data"
    )
