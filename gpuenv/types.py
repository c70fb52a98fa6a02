"""The closed vocabularies every layer shares: platforms and CPU architectures, verify levels, devices,
check statuses and outcomes.

One home for each: the CLI's choices, the provisioning variables, the Docker adapter and the verify
engine all take them from here, so a new level or status is added in one place.
"""

from __future__ import annotations

from typing import Literal, get_args

# Which GPU software a stack's torch build runs on: torch's CUDA, ROCm or CPU wheels (gpuenv.platforms).
PlatformName = Literal["cuda", "rocm", "cpu"]
# A CPU architecture as `uname -m` and Ansible's facts name it (gpuenv.platforms.arch turns it into facts).
CpuArch = Literal["x86_64", "aarch64"]
Level = Literal["quick", "standard", "deep"]
DeviceChoice = Literal["auto", "cuda", "cpu"]  # what a user asks for
Device = Literal["cuda", "cpu"]  # what a run settled on
Status = Literal["pass", "warn", "fail", "skip", "timeout", "crash", "error"]
# What a verify report's verdict says of its host.
ReportOutcome = Literal["certified", "not certified", "could not run", "interrupted"]
# A host's outcome, in the order they are tallied: its report's, or one `fleet verify` gives a host it could not verify.
Outcome = Literal[ReportOutcome, "unreachable", "timeout", "not provisioned"]
# What a GPU management call that did not answer means, whichever library it was (NVML, AMD SMI):
# the GPU is lost (it fails, drain), the reading is absent on this GPU (a normal answer: info), or
# the call failed otherwise (a warning naming the call and its code). The adapters' error tables
# (gpuenv/adapters/*_errors.py) classify each return code per call.
ErrorClass = Literal["lost", "absent", "failed"]
# A GPU management library by its wire name (verify's host facts, the health check's `smi` metric)
Smi = Literal["nvml", "amdsmi"]

PLATFORMS: tuple[PlatformName, ...] = get_args(PlatformName)
CPU_ARCHES: tuple[CpuArch, ...] = get_args(CpuArch)

# A site's own check (gpuenv.verify.site) is named site.NAME, its findings site.NAME.CODE and its figures
# site.NAME.METRIC: nothing of a site's can pose as gpuenv's.
SITE_PREFIX = "site."

LEVELS: tuple[Level, ...] = get_args(Level)
DEVICE_CHOICES: tuple[DeviceChoice, ...] = get_args(DeviceChoice)
STATUSES: tuple[Status, ...] = get_args(Status)
REPORT_OUTCOMES: tuple[ReportOutcome, ...] = get_args(ReportOutcome)
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)


def outcome_named(text: str | None) -> Outcome | None:
    """The outcome spelled `text`, or None when it names none."""
    return next((o for o in OUTCOMES if o == text), None)


def platform_named(text: str | None) -> PlatformName | None:
    """The platform spelled `text`, or None when it names none."""
    return next((p for p in PLATFORMS if p == text), None)
