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
    row = kb.find_cuda(cuda)
    if row is None:
        raise BadRequest(f"unknown CUDA version {cuda}", hint=f"known: {', '.join(c.version for c in kb.cuda)}")
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
