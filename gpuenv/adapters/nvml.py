"""NVML through the `pynvml` module of nvidia-ml-py, imported only when called.

Every per-GPU reading goes through `_read`: a call the GPU or driver does not support
(NOT_SUPPORTED, a function the library lacks, no permission) makes that item unknown, recorded
with the reason, never an exception.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import partial
from typing import Any

XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
FABRIC_INFO_V2 = 0x02000024  # nvmlGpuFabricInfo_v2: version 2, sizeof(nvmlGpuFabricInfo_v2_t)


def _pynvml() -> Any:
    import pynvml  # nvidia-ml-py (extra verify): loaded on the first NVML call

    return pynvml


def init_error_name(exc: Exception) -> str:
    names = {9: "driver-not-loaded", 12: "library-not-found", 18: "library/driver version mismatch", 4: "no-permission"}
    value = getattr(exc, "value", None)
    return names.get(value, f"error {value}: {exc}") if isinstance(value, int) else str(exc)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read(unknown: dict[str, str], key: str, call: Callable[[], Any]) -> Any:
    nv = _pynvml()
    try:
        return call()
    except nv.NVMLError as exc:
        unknown[key] = _error_name(exc)
        return None


def _error_name(exc: Any) -> str:
    nv = _pynvml()
    codes = {
        nv.NVML_ERROR_NOT_SUPPORTED: "NOT_SUPPORTED",
        nv.NVML_ERROR_FUNCTION_NOT_FOUND: "FUNCTION_NOT_FOUND",
        nv.NVML_ERROR_NO_PERMISSION: "NO_PERMISSION",
        nv.NVML_ERROR_GPU_IS_LOST: "GPU_IS_LOST",
        nv.NVML_ERROR_NOT_FOUND: "NOT_FOUND",
    }
    return codes.get(getattr(exc, "value", None), f"NVML error {getattr(exc, 'value', '?')}")


NOT_INSTALLED = "nvidia-ml-py not installed"


def init() -> str | None:
    """nvmlInit; None on success, else the reason (NOT_INSTALLED, or see init_error_name)."""
    try:
        nv = _pynvml()
    except ImportError:
        return NOT_INSTALLED
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        return init_error_name(exc)
    return None


def driver_versions() -> dict[str, Any]:
    """Driver version and the CUDA version the driver supports ("12.4"); needs init()."""
    nv = _pynvml()
    unknown: dict[str, str] = {}
    driver = _read(unknown, "driver", lambda: _text(nv.nvmlSystemGetDriverVersion()))
    cuda = _read(unknown, "cuda_driver", nv.nvmlSystemGetCudaDriverVersion)
    return {
        "driver": driver,
        "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
        "unknown": unknown,
    }


def snapshot() -> dict[str, Any]:
    """Everything the nvml check judges, GPU by GPU (NVML order); needs init()."""
    nv = _pynvml()
    data = driver_versions()
    count = nv.nvmlDeviceGetCount()
    data["gpus"] = [_gpu(nv, i) for i in range(count)]
    return data


def identities() -> list[dict[str, Any]]:
    """Who each GPU is (name, UUID, serial, bus id, compute capability), NVML order; needs init()."""
    nv = _pynvml()
    return [_identity(nv, i, nv.nvmlDeviceGetHandleByIndex(i), {}) for i in range(nv.nvmlDeviceGetCount())]


def _identity(nv: Any, index: int, h: Any, unknown: dict[str, str]) -> dict[str, Any]:
    pci = _read(unknown, "pci", lambda: nv.nvmlDeviceGetPciInfo(h))
    cc = _read(unknown, "compute_capability", lambda: nv.nvmlDeviceGetCudaComputeCapability(h))
    return {
        "index": index,
        "name": _read(unknown, "name", lambda: _text(nv.nvmlDeviceGetName(h))),
        "uuid": _read(unknown, "uuid", lambda: _text(nv.nvmlDeviceGetUUID(h))),
        "serial": _read(unknown, "serial", lambda: _text(nv.nvmlDeviceGetSerial(h))),
        "pci_bus_id": _text(pci.busId).lower() if pci is not None else None,
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
    }


def _gpu(nv: Any, index: int) -> dict[str, Any]:
    unknown: dict[str, str] = {}
    h = nv.nvmlDeviceGetHandleByIndex(index)

    def read(key: str, call: Callable[[], Any]) -> Any:
        return _read(unknown, key, call)

    remap = read("remapped_rows", lambda: nv.nvmlDeviceGetRemappedRows(h))
    temp_threshold = nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    gpu: dict[str, Any] = {
        **_identity(nv, index, h, unknown),
        "ecc_uncorrected": read(
            "ecc_uncorrected",
            lambda: nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
        ),
        "retired_pages_pending": read("retired_pages_pending", lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(h)),
        "remapped_rows": (
            dict(zip(("corrected", "uncorrectable", "pending", "failure"), remap, strict=False)) if remap else None
        ),
        "pcie": {
            "gen": read("pcie_gen", lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            "under_load": False,
            "max_gen": read("pcie_max_gen", lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(h)),
            "width": read("pcie_width", lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
            "max_width": read("pcie_max_width", lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(h)),
        },
        "clock_events": read("clock_events", lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h)),
        "persistence": read("persistence", lambda: nv.nvmlDeviceGetPersistenceMode(h)),
        "temperature": read("temperature", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
        "slowdown_temperature": read(
            "slowdown_temperature", lambda: nv.nvmlDeviceGetTemperatureThreshold(h, temp_threshold)
        ),
        "nvlink_down": _nvlink_down(nv, h, unknown),
        "processes": [p.pid for p in (read("processes", lambda: nv.nvmlDeviceGetComputeRunningProcesses(h)) or [])],
        "memory_used_mib": _memory_used_mib(nv, h, unknown),
        "mig": (read("mig", lambda: nv.nvmlDeviceGetMigMode(h)) or [None])[0],
        "compute_mode": read("compute_mode", lambda: nv.nvmlDeviceGetComputeMode(h)),
        "fabric": _fabric(nv, h, unknown),
        "power": {
            "enforced_mw": read("power_enforced", partial(nv.nvmlDeviceGetEnforcedPowerLimit, h)),
            "default_mw": read("power_default", partial(nv.nvmlDeviceGetPowerManagementDefaultLimit, h)),
            "usage_mw": read("power_usage", partial(nv.nvmlDeviceGetPowerUsage, h)),
        },
        "sm_clock": read("sm_clock", partial(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)),
        "sm_clock_max": read("sm_clock_max", partial(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)),
    }
    gpu["unknown"] = unknown
    return gpu


def _memory_used_mib(nv: Any, h: Any, unknown: dict[str, str]) -> int | None:
    """Memory in use, less what the driver and firmware reserve (MemoryInfo v2; v1 counts both)."""
    info = _read(unknown, "memory", lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2))
    return None if info is None else int(info.used) // (1 << 20)


def _nvlink_down(nv: Any, h: Any, unknown: dict[str, str]) -> list[int] | None:
    """Links that exist but are inactive; None when the GPU has no NVLink or cannot say."""
    down = []
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active = nv.nvmlDeviceGetNvLinkState(h, link)
        except nv.NVMLError as exc:
            if link == 0:
                unknown["nvlink"] = _error_name(exc)
                return None
            break  # past the last link of this GPU
        if not active:
            down.append(link)
    return down


def pcie_generations(indices: list[int]) -> dict[int, int | None]:
    """The current PCIe link generation of these GPUs (NVML index); needs init()."""
    nv = _pynvml()
    unknown: dict[str, str] = {}
    return {
        i: _read(unknown, "pcie_gen", partial(nv.nvmlDeviceGetCurrPcieLinkGeneration, nv.nvmlDeviceGetHandleByIndex(i)))
        for i in indices
    }


def load_sample(indices: list[int]) -> dict[int, dict[str, Any]]:
    """One reading under load of these GPUs (NVML index): clock-event reasons, SM clock (MHz),
    temperature (°C) and power draw (mW); an item the GPU cannot give is None. Needs init()."""
    nv = _pynvml()
    unknown: dict[str, str] = {}
    found = {}
    for i in indices:
        h = nv.nvmlDeviceGetHandleByIndex(i)
        found[i] = {
            "clock_events": _read(unknown, "clock_events", partial(nv.nvmlDeviceGetCurrentClocksEventReasons, h)),
            "sm_clock": _read(unknown, "sm_clock", partial(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)),
            "temperature": _read(
                unknown, "temperature", partial(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            ),
            "power_mw": _read(unknown, "power", partial(nv.nvmlDeviceGetPowerUsage, h)),
        }
    return found


# NVML's violation counters (nvmlDeviceGetViolationStatus): the time, in ns, a limit held the clocks down
VIOLATION_POLICIES = {
    "power": 0,
    "thermal": 1,
    "sync_boost": 2,
    "board_limit": 3,
    "low_utilization": 4,
    "reliability": 5,
}


def violation_times_ns(indices: list[int]) -> dict[int, dict[str, int]]:
    """The violation counters of these GPUs (NVML index), by policy name; a counter the GPU does
    not keep is left out. Needs init()."""
    nv = _pynvml()
    found: dict[int, dict[str, int]] = {}
    for i in indices:
        h = nv.nvmlDeviceGetHandleByIndex(i)
        found[i] = {}
        for name, policy in VIOLATION_POLICIES.items():
            status = _read({}, name, partial(nv.nvmlDeviceGetViolationStatus, h, policy))
            if status is not None:
                found[i][name] = int(status.violationTime)
    return found


def _fabric(nv: Any, h: Any, unknown: dict[str, str]) -> dict[str, int] | None:
    """NVSwitch fabric state (Fabric Manager), where the GPU and driver have it.

    pynvml forwards the struct as given, so it must go by reference with its version set."""
    try:
        info = nv.c_nvmlGpuFabricInfo_v2_t()
        info.version = FABRIC_INFO_V2
        nv.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
        return {"state": int(info.state), "status": int(info.status), "clique": int(info.cliqueId)}
    except nv.NVMLError as exc:
        unknown["fabric"] = _error_name(exc)
    except (AttributeError, TypeError) as exc:
        unknown["fabric"] = f"bindings lack it: {exc}"
    return None


def register_xids(state: dict[str, Any], count: int) -> list[str]:
    """Register for XID events on every GPU, keeping the event set in `state`; returns the GPUs
    (by index) that cannot."""
    nv = _pynvml()
    missing = []
    try:
        event_set = nv.nvmlEventSetCreate()
    except nv.NVMLError as exc:
        return [f"all: {_error_name(exc)}"]
    for i in range(count):
        try:
            nv.nvmlDeviceRegisterEvents(nv.nvmlDeviceGetHandleByIndex(i), XID_EVENT, event_set)
        except nv.NVMLError as exc:
            missing.append(f"GPU {i}: {_error_name(exc)}")
    state["xid_set"] = event_set
    state["handles"] = {_handle_key(nv.nvmlDeviceGetHandleByIndex(i)): i for i in range(count)}
    return missing


def _handle_key(handle: Any) -> int:
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


def drain_xids(state: dict[str, Any]) -> list[tuple[int, int]]:
    """(GPU index, XID) for every XID event since registration; waits for none."""
    event_set = state.get("xid_set")
    if event_set is None:
        return []
    nv = _pynvml()
    seen = []
    for _ in range(1000):
        try:
            event = nv.nvmlEventSetWait_v2(event_set, 0)
        except nv.NVMLError:
            break  # TIMEOUT: nothing more
        if event.eventType & XID_EVENT:
            seen.append((state["handles"].get(_handle_key(event.device), -1), int(event.eventData)))
    return seen


def energy_mj(indices: list[int]) -> dict[int, int | None]:
    """Total energy counters (millijoules) of the GPUs with these NVML indices; needs init()."""
    nv = _pynvml()
    unknown: dict[str, str] = {}
    found: dict[int, int | None] = {}
    for i in indices:
        handle = nv.nvmlDeviceGetHandleByIndex(i)
        found[i] = _read(unknown, "energy", partial(nv.nvmlDeviceGetTotalEnergyConsumption, handle))
    return found


def power_mw(indices: list[int]) -> dict[int, int | None]:
    """Current power draw (milliwatts) of the GPUs with these NVML indices; needs init()."""
    nv = _pynvml()
    unknown: dict[str, str] = {}
    return {
        i: _read(unknown, "power", partial(nv.nvmlDeviceGetPowerUsage, nv.nvmlDeviceGetHandleByIndex(i)))
        for i in indices
    }


class NvmlCallFailed(Exception):
    """An NVML call that must succeed did not; `reason` as _error_name gives it (NO_PERMISSION, ...)."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what}: {reason}")
        self.reason = reason


def _must(what: str, call: Callable[[], Any]) -> Any:
    nv = _pynvml()
    try:
        return call()
    except nv.NVMLError as exc:
        raise NvmlCallFailed(what, _error_name(exc)) from exc


def power_limits() -> list[dict[str, Any]]:
    """Every GPU's power-limit range, default and limit in force (milliwatts), NVML order; needs
    init(). A value the GPU cannot give is None, with the reason in `unknown`."""
    nv = _pynvml()
    found = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        unknown: dict[str, str] = {}
        bounds = _read(unknown, "constraints", partial(nv.nvmlDeviceGetPowerManagementLimitConstraints, h))
        found.append(
            {
                **_identity(nv, i, h, unknown),
                "min_mw": int(bounds[0]) if bounds else None,
                "max_mw": int(bounds[1]) if bounds else None,
                "default_mw": _read(unknown, "default", partial(nv.nvmlDeviceGetPowerManagementDefaultLimit, h)),
                "limit_mw": _read(unknown, "limit", partial(nv.nvmlDeviceGetPowerManagementLimit, h)),
                "unknown": unknown,
            }
        )
    return found


def power_limit_mw(index: int) -> int:
    """The power limit in force on one GPU (NVML index), milliwatts; raises NvmlCallFailed."""
    nv = _pynvml()
    h = _must(f"GPU {index}", partial(nv.nvmlDeviceGetHandleByIndex, index))
    return int(_must(f"GPU {index}: reading its power limit", partial(nv.nvmlDeviceGetPowerManagementLimit, h)))


def set_power_limit_mw(index: int, milliwatts: int) -> None:
    """Set one GPU's power limit (root); the driver keeps it until reboot, reset or the next set."""
    nv = _pynvml()
    h = _must(f"GPU {index}", partial(nv.nvmlDeviceGetHandleByIndex, index))
    _must(
        f"GPU {index}: setting its power limit to {milliwatts / 1000:g} W",
        partial(nv.nvmlDeviceSetPowerManagementLimit, h, int(milliwatts)),
    )
