"""One face for the GPU management libraries: NVML (gpuenv.adapters.nvml) and AMD SMI
(gpuenv.adapters.amdsmi) are both modules with these functions, these signatures and these units
(milliwatts, millijoules, MHz, °C), so that verify, tune power and the Slurm hooks call whichever
the node's platform names (gpuenv.platforms.node) without asking which it is. mypy (strict) checks
each module against `GpuManagement` where a platform's node half hands it out.

The readings speak one vocabulary:
- why the clocks are held down (`ClockCause`): each library's bits or limits translated at the
  adapter (NVML's clock-event reasons: gpuenv.adapters.nvml.CLOCK_CAUSES; AMD SMI's violation
  status: gpuenv.adapters.amdsmi.VIOLATION_LIMITS);
- a link's state (`LinkState`): NVLink's and XGMI's, each link up or down;
- what a call that did not answer means (gpuenv.types.ErrorClass: lost, absent, failed), from each
  library's table of codes per call (nvml_errors.py, amdsmi_errors.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

# The causes the health rules judge: a thermal limit (the GPU's own sensors, the board's, the memory's
# or a voltage regulator's), the power brake (an external signal), a hardware slowdown, the software
# power cap, clocks set on purpose (application clocks, a host limit), the engine idle; NVML's sync
# boost and AMD's PROCHOT keep their own names.
ClockCause = Literal[
    "idle",
    "configured",
    "power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "thermal",
    "vr_thermal",
    "memory_thermal",
    "prochot",
    "power_brake",
]
LinkState = Literal["up", "down"]
LINK_STATES: tuple[LinkState, ...] = ("up", "down")  # a GPU's links by state: NVLink's, XGMI's


class GpuManagement(Protocol):
    """What each management library answers; a per-GPU reading it cannot take is None, with the call,
    the library's code and its ErrorClass in the GPU's `unread`, never an exception."""

    def init(self) -> str | None:
        """Start the library: None, or why it cannot be used (see `missing`)."""

    def missing(self, problem: str) -> bool:
        """Whether `problem` (from init) says gpuenv's own tooling lacks the library, not that a GPU is bad."""

    def count_problem(self) -> str | None:
        """Why the library cannot list its GPUs (the call and its code), or None."""

    def identities(self) -> list[dict[str, Any]]:
        """Who each GPU is (index, name, UUID, serial, bus id, its GPU code), the library's order."""

    def driver_versions(self) -> dict[str, Any]:
        """The driver ("driver") and the CUDA version it supports ("cuda_driver": None on AMD), with `unread`."""

    def snapshot(self) -> dict[str, Any]:
        """Everything the health check judges at idle, GPU by GPU."""

    def load_sample(self, indices: list[int]) -> dict[int, dict[str, Any]]:
        """One reading under load of these GPUs: clock, temperatures, power, `causes` (ClockCause)."""

    def energy_mj(self, indices: list[int]) -> Mapping[int, float | None]:
        """The GPUs' energy counters (millijoules); None where a GPU keeps none."""

    def power_mw(self, indices: list[int]) -> Mapping[int, int | None]:
        """The power the GPUs draw now (milliwatts); None where a GPU cannot say."""

    def register_xids(self, state: dict[str, Any], count: int) -> list[dict[str, Any]]:
        """Watch the driver's XID events on every GPU (state kept in `state`): the calls that failed.
        A library without XID events registers none and fails none."""

    def drain_xids(self, state: dict[str, Any]) -> tuple[list[tuple[int, int, int | None]], dict[str, Any] | None]:
        """(GPU, XID, recovery action) for each event since registration, and how the wait failed."""

    def power_limits(self) -> list[dict[str, Any]]:
        """Every GPU's power-limit range, default and limit in force (milliwatts), with `unknown`."""

    def power_limit_mw(self, index: int) -> int:
        """The power limit in force on one GPU; raises the library's CallFailed."""

    def set_power_limit_mw(self, index: int, milliwatts: int) -> None:
        """Set one GPU's power limit (root); raises the library's CallFailed."""

    @property
    def CallFailed(self) -> type[Exception]:
        """What a call that must succeed raises, with the library's code as `reason`."""
