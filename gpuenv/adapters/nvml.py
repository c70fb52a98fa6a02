"""NVML through the `pynvml` module of nvidia-ml-py, imported only when called: one of the GPU management
libraries behind gpuenv.adapters.management's face. Every call on a GPU goes through `_read`: a call that does
not answer leaves its reading None and records, under the reading's name in the GPU's `unread`, the call, NVML's
code and what it means for that call (nvml_errors.py: lost, absent, failed), never an exception; the handle
and count calls likewise (a GPU whose handle cannot be had is listed with only its index and why).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache, partial
from typing import Any

from gpuenv.adapters.management import LINK_STATES, ClockCause
from gpuenv.adapters.nvml_c2c import c2c_links
from gpuenv.adapters.nvml_errors import classify

XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
XID_RECOVERY = 154  # GPU recovery action changed: the action is read from field 230
FABRIC_INFO_V2 = 0x02000024  # nvmlGpuFabricInfo_v2: version 2, sizeof(nvmlGpuFabricInfo_v2_t)
FIELD_MEMORY_TEMP = 82  # NVML_FI_DEV_MEMORY_TEMP
FIELD_RECOVERY_ACTION = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
CLOCK_CAUSES: dict[int, ClockCause] = {  # NVML's clock-event reasons in the causes' vocabulary (management.py)
    0x1: "idle",
    0x2: "configured",  # application clocks
    0x4: "power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "power_brake",
    0x100: "configured",  # display clock setting
}

Unread = dict[str, dict[str, str]]


def _pynvml() -> Any:
    import pynvml  # nvidia-ml-py (extra verify): loaded on the first NVML call

    return pynvml


def init_error_name(exc: Exception) -> str:
    names = {9: "driver-not-loaded", 12: "library-not-found", 18: "library/driver version mismatch", 4: "no-permission"}
    value = getattr(exc, "value", None)
    return names.get(value, f"error {value}: {exc}") if isinstance(value, int) else str(exc)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def code_name(value: Any) -> str:
    """NVML's name for a return code, without NVML_ERROR_ ("GPU_IS_LOST"), else "NVML error N"."""
    return _code_names().get(value, f"NVML error {value}")


@cache
def _code_names() -> dict[int, str]:
    nv = _pynvml()
    return {getattr(nv, n): n.removeprefix("NVML_ERROR_") for n in dir(nv) if n.startswith("NVML_ERROR_")}


def failure(call: str, code: str) -> dict[str, str]:
    """How a call that did not answer is recorded: the call, NVML's code, and its class."""
    return {"call": call, "code": code, "class": classify(call, code)}


def _read(unread: Unread, key: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`call(*args)`, or None with the failure recorded in `unread[key]`."""
    nv = _pynvml()
    try:
        return call(*args, **kwargs)
    except nv.NVMLError as exc:
        unread[key] = failure(call.__name__, code_name(getattr(exc, "value", None)))
        return None


NOT_INSTALLED = "nvidia-ml-py not installed"


def missing(problem: str) -> bool:
    """Whether `problem` (from init) says NVML is not there at all (no bindings, no libnvidia-ml), not a bad GPU."""
    return problem == NOT_INSTALLED or problem.startswith("library-not-found")


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
    unread: Unread = {}
    driver = _text(_read(unread, "driver", nv.nvmlSystemGetDriverVersion))
    cuda = _read(unread, "cuda_driver", nv.nvmlSystemGetCudaDriverVersion)
    return {
        "driver": driver,
        "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
        "unread": unread,
    }


def gpu_count(unread: Unread) -> int:
    """How many GPUs NVML lists (0, with the failure in `unread`, when it cannot say); needs init()."""
    return int(_read(unread, "count", _pynvml().nvmlDeviceGetCount) or 0)


def count_problem() -> str | None:
    """Why NVML cannot count its GPUs ("nvmlDeviceGetCount answered GPU_IS_LOST"), or None; needs init()."""
    gpu_count(unread := Unread())
    return f"{unread['count']['call']} answered {unread['count']['code']}" if unread else None


def snapshot() -> dict[str, Any]:
    """Everything the nvml check judges, GPU by GPU (NVML order); needs init()."""
    data = driver_versions()
    data["gpus"] = [_gpu(_pynvml(), i) for i in range(gpu_count(data["unread"]))]
    return data


def identities() -> list[dict[str, Any]]:
    """Who each GPU is (name, UUID, serial, bus id, compute capability, and what could not be read),
    NVML order; needs init()."""
    nv = _pynvml()
    found = []
    for i in range(gpu_count({})):
        unread: Unread = {}
        h = _read(unread, "handle", nv.nvmlDeviceGetHandleByIndex, i)
        found.append({**_identity(nv, i, h, unread), "unread": unread})
    return found


def _identity(nv: Any, index: int, h: Any, unread: Unread) -> dict[str, Any]:
    if h is None:
        return {"index": index, **dict.fromkeys(("name", "uuid", "serial", "pci_bus_id", "compute_capability"))}
    pci = _read(unread, "pci", nv.nvmlDeviceGetPciInfo, h)
    cc = _read(unread, "compute_capability", nv.nvmlDeviceGetCudaComputeCapability, h)
    return {
        "index": index,
        "name": _text(_read(unread, "name", nv.nvmlDeviceGetName, h)),
        "uuid": _text(_read(unread, "uuid", nv.nvmlDeviceGetUUID, h)),
        "serial": _text(_read(unread, "serial", nv.nvmlDeviceGetSerial, h)),
        "pci_bus_id": _text(pci.busId).lower() if pci is not None else None,  # type: ignore[union-attr]
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
    }


def _gpu(nv: Any, index: int) -> dict[str, Any]:
    unread: Unread = {}
    h = _read(unread, "handle", nv.nvmlDeviceGetHandleByIndex, index)
    if h is None:  # nothing else can be asked of it
        return {**_identity(nv, index, None, unread), "unread": unread}

    def read(key: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return _read(unread, key, call, h, *args, **kwargs)

    remap = read("remapped_rows", nv.nvmlDeviceGetRemappedRows)
    sm, thresholds = nv.NVML_CLOCK_SM, (nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, nv.NVML_TEMPERATURE_THRESHOLD_MEM_MAX)
    memory = read("memory", nv.nvmlDeviceGetMemoryInfo, version=nv.nvmlMemory_v2)
    gpu: dict[str, Any] = {
        **_identity(nv, index, h, unread),
        "ecc_uncorrected": read("ecc_uncorrected", nv.nvmlDeviceGetTotalEccErrors, *_uncorrected_volatile(nv)),
        "retired_pages_pending": read("retired_pages_pending", nv.nvmlDeviceGetRetiredPagesPendingStatus),
        "remapped_rows": (
            dict(zip(("corrected", "uncorrectable", "pending", "failure"), remap, strict=False)) if remap else None
        ),
        "pcie": {
            "gen": read("pcie_gen", nv.nvmlDeviceGetCurrPcieLinkGeneration),
            "under_load": False,
            "max_gen": read("pcie_max_gen", nv.nvmlDeviceGetMaxPcieLinkGeneration),
            "width": read("pcie_width", nv.nvmlDeviceGetCurrPcieLinkWidth),
            "max_width": read("pcie_max_width", nv.nvmlDeviceGetMaxPcieLinkWidth),
        },
        "clock_events": read("clock_events", nv.nvmlDeviceGetCurrentClocksEventReasons),
        "persistence": read("persistence", nv.nvmlDeviceGetPersistenceMode),
        "temperature": read("temperature", nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU),
        "slowdown_temperature": read("slowdown_temperature", nv.nvmlDeviceGetTemperatureThreshold, thresholds[0]),
        "memory_temperature": _field(nv, h, FIELD_MEMORY_TEMP, "memory_temperature", unread),
        "memory_slowdown_temperature": read(
            "memory_slowdown_temperature", nv.nvmlDeviceGetTemperatureThreshold, thresholds[1]
        ),
        "links": _nvlinks(nv, h, unread),
        "c2c": c2c_links(lambda field, tried: _field(nv, h, field, "c2c", tried), unread),
        "processes": [p.pid for p in (read("processes", nv.nvmlDeviceGetComputeRunningProcesses) or [])],
        "memory_used_mib": None if memory is None else int(memory.used) // (1 << 20),  # v2: less what is reserved
        "mig": (read("mig", nv.nvmlDeviceGetMigMode) or [None])[0],
        "compute_mode": read("compute_mode", nv.nvmlDeviceGetComputeMode),
        "fabric": _fabric(nv, h, unread),
        "power": {
            "enforced_mw": read("power_enforced", nv.nvmlDeviceGetEnforcedPowerLimit),
            "default_mw": read("power_default", nv.nvmlDeviceGetPowerManagementDefaultLimit),
            "usage_mw": read("power_usage", nv.nvmlDeviceGetPowerUsage),
        },
        "sm_clock": read("sm_clock", nv.nvmlDeviceGetClockInfo, sm),
        "sm_clock_max": read("sm_clock_max", nv.nvmlDeviceGetMaxClockInfo, sm),
        "app_clock": read("app_clock", nv.nvmlDeviceGetApplicationsClock, sm),
        "app_clock_default": read("app_clock_default", nv.nvmlDeviceGetDefaultApplicationsClock, sm),
    }
    gpu["unread"] = unread
    return gpu


def _uncorrected_volatile(nv: Any) -> tuple[int, int]:
    return nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC


def _field(nv: Any, h: Any, field: int | tuple[int, int], key: str, unread: Unread) -> int | None:
    """One of NVML's field values, by its id (and scope: a link's index); each field answers its own return code."""
    values = _read(unread, key, nv.nvmlDeviceGetFieldValues, h, [field])
    if values is None:
        return None
    if values[0].nvmlReturn != 0:
        unread[key] = failure("nvmlDeviceGetFieldValues", code_name(values[0].nvmlReturn))
        return None
    return int(values[0].value.uiVal)


def _nvlinks(nv: Any, h: Any, unread: Unread) -> dict[str, Any] | None:
    """The GPU's NVLinks, active (`up`) and inactive (`down`): NVML answers each link until
    INVALID_ARGUMENT past the last. None when the GPU has none or a link could not be read."""
    states: dict[str, list[int]] = {state: [] for state in LINK_STATES}
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        active = _read(unread, "nvlink", nv.nvmlDeviceGetNvLinkState, h, link)
        if active is None:
            if link and unread["nvlink"]["class"] == "absent":
                del unread["nvlink"]  # past the GPU's last link
                break
            return None
        states["up" if active else "down"].append(link)
    return {"kind": "nvlink", **states}


def _handle(nv: Any, index: int, unread: Unread) -> Any:
    return _read(unread, "handle", nv.nvmlDeviceGetHandleByIndex, index)


def pcie_generations(indices: list[int]) -> dict[int, dict[str, Any]]:
    """The current PCIe link generation of these GPUs (NVML index), as {"gen", "unread"}; needs init()."""
    nv = _pynvml()
    found = {}
    for i in indices:
        unread: Unread = {}
        h = _handle(nv, i, unread)
        gen = None if h is None else _read(unread, "pcie_gen", nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
        found[i] = {"gen": gen, "unread": unread}
    return found


def load_sample(indices: list[int]) -> dict[int, dict[str, Any]]:
    """One reading under load of these GPUs (NVML index): the causes holding the clocks (CLOCK_CAUSES,
    `clock_events` NVML's bits), SM clock (MHz), GPU and memory temperature (°C), power draw (mW);
    an item the GPU cannot give is None, with the failure in `unread`. Needs init()."""
    nv = _pynvml()
    found: dict[int, dict[str, Any]] = {}
    for i in indices:
        unread: Unread = {}
        h = _handle(nv, i, unread)
        if h is None:
            found[i] = {"unread": unread}
            continue
        reasons = _read(unread, "clock_events", nv.nvmlDeviceGetCurrentClocksEventReasons, h)
        found[i] = {
            "clock_events": reasons,
            "causes": None if reasons is None else sorted({c for bit, c in CLOCK_CAUSES.items() if reasons & bit}),
            "sm_clock": _read(unread, "sm_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
            "temperature": _read(unread, "temperature", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
            "memory_temperature": _field(nv, h, FIELD_MEMORY_TEMP, "memory_temperature", unread),
            "power_mw": _read(unread, "power", nv.nvmlDeviceGetPowerUsage, h),
            "unread": unread,
        }
    return found


# NVML's violation counters (nvmlDeviceGetViolationStatus): the time, in ns, a limit held the clocks down
_POLICY_NAMES = ("power", "thermal", "sync_boost", "board_limit", "low_utilization", "reliability")
VIOLATION_POLICIES = {name: number for number, name in enumerate(_POLICY_NAMES)}  # nvmlPerfPolicyType_t's order


def violation_times_ns(indices: list[int]) -> dict[int, dict[str, Any]]:
    """The violation counters of these GPUs (NVML index), by policy name, with `unread`; a counter
    the GPU does not keep is left out. Needs init()."""
    nv = _pynvml()
    found: dict[int, dict[str, Any]] = {}
    for i in indices:
        unread: Unread = {}
        h = _handle(nv, i, unread)
        counters: dict[str, Any] = {}
        for name, policy in VIOLATION_POLICIES.items() if h is not None else ():
            status = _read(unread, f"violation_{name}", nv.nvmlDeviceGetViolationStatus, h, policy)
            if status is not None:
                counters[name] = int(status.violationTime)
        found[i] = {**counters, "unread": unread}
    return found


def _fabric(nv: Any, h: Any, unread: Unread) -> dict[str, int] | None:
    """NVSwitch fabric state (Fabric Manager), where the GPU and driver have it.

    pynvml forwards the struct as given, so it must go by reference with its version set."""
    try:
        info = nv.c_nvmlGpuFabricInfo_v2_t()
    except AttributeError:
        unread["fabric"] = {"call": "nvmlDeviceGetGpuFabricInfoV", "code": "not in these bindings", "class": "absent"}
        return None
    info.version = FABRIC_INFO_V2
    if _read(unread, "fabric", nv.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(info)) is None:
        return None
    return {"state": int(info.state), "status": int(info.status), "clique": int(info.cliqueId)}


def register_xids(state: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """Register for XID events on every GPU, keeping the event set in `state`; returns each call
    that failed, with the GPU's index (None for the event set itself)."""
    nv = _pynvml()
    unread: Unread = {}
    event_set = _read(unread, "xid_events", nv.nvmlEventSetCreate)
    if event_set is None:
        return [{"gpu": None, **unread["xid_events"]}]
    failed, handles = [], {}
    for i in range(count):
        unread = {}
        h = _handle(nv, i, unread)
        if h is not None:
            handles[_handle_key(h)] = i
            _read(unread, "xid_events", nv.nvmlDeviceRegisterEvents, h, XID_EVENT, event_set)
        failed += [{"gpu": i, **f} for f in unread.values()]
    state["xid_set"], state["handles"] = event_set, handles
    return failed


def _handle_key(handle: Any) -> int:
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


def drain_xids(state: dict[str, Any]) -> tuple[list[tuple[int, int, int | None]], dict[str, Any] | None]:
    """(GPU index, XID, the GPU's recovery action for XID 154, else None) for every XID event since
    registration, waiting for none; and how the wait failed, if it did other than "no event"."""
    event_set = state.get("xid_set")
    if event_set is None:
        return [], None
    nv = _pynvml()
    seen: list[tuple[int, int, int | None]] = []
    for _ in range(1000):
        unread: Unread = {}
        event = _read(unread, "wait", nv.nvmlEventSetWait_v2, event_set, 0)
        if event is None:
            return seen, None if unread["wait"]["class"] == "absent" else unread["wait"]
        if event.eventType & XID_EVENT:
            xid = int(event.eventData)
            action = _field(nv, event.device, FIELD_RECOVERY_ACTION, "recovery", {}) if xid == XID_RECOVERY else None
            seen.append((state["handles"].get(_handle_key(event.device), -1), xid, action))
    return seen, None


def energy_mj(indices: list[int]) -> dict[int, float | None]:
    """Total energy counters (millijoules) of the GPUs with these NVML indices; needs init()."""
    return _each(indices, "energy", _pynvml().nvmlDeviceGetTotalEnergyConsumption)


def power_mw(indices: list[int]) -> dict[int, int | None]:
    """Current power draw (milliwatts) of the GPUs with these NVML indices; needs init()."""
    return _each(indices, "power", _pynvml().nvmlDeviceGetPowerUsage)


def _each(indices: list[int], key: str, call: Callable[[Any], Any]) -> dict[int, Any]:
    """`call(handle)` for each of these GPUs (NVML index); None where it does not answer."""
    nv = _pynvml()
    found: dict[int, Any] = {}
    for i in indices:
        unread: Unread = {}
        h = _handle(nv, i, unread)
        found[i] = None if h is None else _read(unread, key, call, h)
    return found


class NvmlCallFailed(Exception):
    """An NVML call that must succeed did not; `reason` is NVML's code name (NO_PERMISSION, ...)."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what}: {reason}")
        self.reason = reason


CallFailed = NvmlCallFailed


def _must(what: str, call: Callable[[], Any]) -> Any:
    nv = _pynvml()
    try:
        return call()
    except nv.NVMLError as exc:
        raise NvmlCallFailed(what, code_name(getattr(exc, "value", None))) from exc


def power_limits() -> list[dict[str, Any]]:
    """Every GPU's power-limit range, default and limit in force (milliwatts), NVML order; needs
    init(). A value the GPU cannot give is None, with NVML's code in `unknown`."""
    nv = _pynvml()
    found = []
    for i in range(gpu_count({})):
        unread: Unread = {}
        h = _handle(nv, i, unread)
        limits: dict[str, Any] = {"min_mw": None, "max_mw": None, "default_mw": None, "limit_mw": None}
        if h is not None:
            bounds = _read(unread, "constraints", nv.nvmlDeviceGetPowerManagementLimitConstraints, h)
            limits = {
                "min_mw": int(bounds[0]) if bounds else None,
                "max_mw": int(bounds[1]) if bounds else None,
                "default_mw": _read(unread, "default", nv.nvmlDeviceGetPowerManagementDefaultLimit, h),
                "limit_mw": _read(unread, "limit", nv.nvmlDeviceGetPowerManagementLimit, h),
            }
        found.append(
            {**_identity(nv, i, h, unread), **limits, "unknown": {key: f["code"] for key, f in unread.items()}}
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
