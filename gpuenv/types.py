"""The closed vocabularies every layer shares: verify levels, devices and check statuses.

One home for each: the CLI's choices, the provisioning variables, the Docker adapter and the verify
engine all take them from here, so a new level or status is added in one place.
"""

from __future__ import annotations

from typing import Literal, get_args

Level = Literal["quick", "standard", "deep"]
Device = Literal["auto", "cuda", "cpu"]
Status = Literal["pass", "warn", "fail", "skip", "timeout", "crash", "error"]

LEVELS: tuple[Level, ...] = get_args(Level)
DEVICES: tuple[Device, ...] = get_args(Device)
STATUSES: tuple[Status, ...] = get_args(Status)
