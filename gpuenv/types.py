"""The closed vocabularies every layer shares: verify levels, devices, check statuses and outcomes.

One home for each: the CLI's choices, the provisioning variables, the Docker adapter and the verify
engine all take them from here, so a new level or status is added in one place.
"""

from __future__ import annotations

from typing import Literal, get_args

Level = Literal["quick", "standard", "deep"]
DeviceChoice = Literal["auto", "cuda", "cpu"]  # what a user asks for
Device = Literal["cuda", "cpu"]  # what a run settled on
Status = Literal["pass", "warn", "fail", "skip", "timeout", "crash", "error"]
# What a verify report's verdict says of its host.
ReportOutcome = Literal["certified", "not certified", "could not run", "interrupted"]
# A host's outcome, in the order they are tallied: its report's, or one `fleet verify` gives a host it could not verify.
Outcome = Literal[ReportOutcome, "unreachable", "timeout", "not provisioned"]

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
