"""AMD SMI through the `amdsmi` Python bindings (extra rocm), imported only when called.

The bindings load `libamd_smi.so` when they are imported: from $ROCM_HOME/lib or $ROCM_PATH/lib,
then wherever the dynamic linker finds it, then /opt/rocm/lib. Where it is not found they print
the reason and fail with a KeyError; `init` turns that (and a missing module) into a reason.

`snapshot` reads every GPU in the shape gpuenv.adapters.nvml.snapshot gives, so the nvml check's
pure rules judge both vendors: a per-GPU reading that cannot be taken is None, with the call, AMD
SMI's status and its class (the GPU lost, the reading absent, the call failed:
gpuenv/adapters/amdsmi_errors.py) in the GPU's `unread`, never an exception. Units as NVML's:
milliwatts, MHz, °C.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from functools import partial
from typing import Any

from gpuenv.adapters.amdsmi_errors import classify, code_name
from gpuenv.adapters.management import ClockCause, LinkState

INSTALL_HINT = "pip install 'gpuenv[rocm]' (the amdsmi bindings of the host's ROCm release)"
LIBRARY_HINT = "install ROCm's amd-smi-lib (the amdgpu driver's user space) or set ROCM_PATH to the ROCm install"
PAGE_PENDING = 1  # AMDSMI_MEM_PAGE_STATUS_PENDING: retired at the next reset or reboot
PAGE_UNRESERVABLE = 2  # AMDSMI_MEM_PAGE_STATUS_UNRESERVABLE: bad, and cannot be retired
RAS_CLASSES = ("correctable", "uncorrectable", "deferred")  # amdsmi_error_count_t's counts
Unread = dict[str, dict[str, str]]
# AMD SMI's violation status: a limit holding the clocks down now (active_*), by the name a finding uses
THERMAL_LIMITS = {
    "active_socket_thrm": "socket thermal limit",
    "active_prochot_thrm": "PROCHOT thermal limit",
    "active_vr_thrm": "voltage-regulator thermal limit",
    "active_hbm_thrm": "HBM thermal limit",
}


def _amdsmi() -> Any:
    import amdsmi  # amdsmi (extra rocm): loads libamd_smi.so, so only on the first AMD SMI call

    return amdsmi


def _load() -> tuple[Any, str | None]:
    """The bindings, or why they cannot load. What they print while loading is kept, not shown:
    gpuenv's stdout may be a JSON report."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            return _amdsmi(), None
    except ImportError as exc:
        return None, f"amdsmi not installed ({exc}): {INSTALL_HINT}"
    except (KeyError, OSError, AttributeError) as exc:
        said = printed.getvalue().strip().splitlines()
        why = said[0] if said else str(exc)
        return None, f"library-not-found: libamd_smi.so ({why}); {LIBRARY_HINT}"


def init() -> str | None:
    """amdsmi_init for AMD GPUs; None on success, else the reason (starting
    `library-not-found` or `amdsmi not installed` when gpuenv cannot read AMD SMI at all)."""
    smi, problem = _load()
    if problem:
        return problem
    try:
        smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)
    except smi.AmdSmiException as exc:
        return _error_name(exc)
    return None


def missing(problem: str) -> bool:
    """Whether `problem` (from init) says gpuenv itself lacks AMD SMI, not that a GPU is bad."""
    return problem.startswith(("library-not-found", "amdsmi not installed"))


def _error_name(exc: Any) -> str:
    code = exc.get_error_code() if hasattr(exc, "get_error_code") else None
    names = {
        1: "INVALID_ARGUMENT",
        2: "NOT_SUPPORTED",
        10: "NO_PERMISSION",
        31: "NOT_FOUND",
        34: "driver-not-loaded",
        51: "driver-not-loaded",
    }
    return names.get(code, f"AMD SMI error {code}") if isinstance(code, int) else str(exc)


def _read(unread: Unread, key: str, call: Callable[..., Any], *args: Any) -> Any:
    """`call(*args)`, or None with the failure recorded in `unread[key]` (the call, AMD SMI's
    status and its class: gpuenv/adapters/amdsmi_errors.py)."""
    smi = _amdsmi()
    try:
        return call(*args)
    except smi.AmdSmiException as exc:
        code = code_name(exc.get_error_code()) if hasattr(exc, "get_error_code") else f"bad argument: {exc}"
        unread[key] = {"call": call.__name__, "code": code, "class": classify(call.__name__, code)}
        return None


def _handles(unread: Unread) -> list[Any]:
    """Every GPU's handle (none, with the failure in `unread`, when AMD SMI cannot list them)."""
    return list(_read(unread, "count", _amdsmi().amdsmi_get_processor_handles) or [])


def count_problem() -> str | None:
    """Why AMD SMI cannot list its GPUs ("amdsmi_get_processor_handles answered DRM_ERROR"), or None; needs init()."""
    unread: Unread = {}
    _handles(unread)
    return f"{unread['count']['call']} answered {unread['count']['code']}" if unread else None


def register_xids(state: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """Nothing to register: AMD GPUs raise no XID events (their RAS error counts are read in `snapshot`)."""
    return []


def drain_xids(state: dict[str, Any]) -> tuple[list[tuple[int, int, int | None]], dict[str, Any] | None]:
    """No XID events on AMD GPUs (see register_xids)."""
    return [], None


def identities() -> list[dict[str, Any]]:
    """Who each GPU is (name, UUID, serial, bus id, gfx target, and what could not be read), AMD
    SMI order; needs init()."""
    found = []
    for i, h in enumerate(_handles({})):
        unread: Unread = {}
        found.append({**_identity(i, h, unread), "unread": unread})
    return found


def _identity(index: int, h: Any, unread: Unread) -> dict[str, Any]:
    smi = _amdsmi()
    asic = _read(unread, "asic", smi.amdsmi_get_gpu_asic_info, h) or {}
    board = _read(unread, "serial", smi.amdsmi_get_gpu_board_info, h) or {}
    bdf = _read(unread, "pci", smi.amdsmi_get_gpu_device_bdf, h)
    return {
        "index": index,
        "name": _known(asic.get("market_name")),
        "uuid": _read(unread, "uuid", smi.amdsmi_get_gpu_device_uuid, h),
        "serial": _known(board.get("product_serial")) or _known(asic.get("asic_serial")),
        "pci_bus_id": str(bdf).lower() if bdf else None,
        "compute_capability": None,
        "gfx": _known(asic.get("target_graphics_version")),
    }


def _known(value: Any) -> str | None:
    return None if value in (None, "", "N/A") else str(value)


def driver_versions() -> dict[str, Any]:
    """The amdgpu driver's version (from the first GPU); there is no CUDA driver. Needs init()."""
    smi = _amdsmi()
    unread: Unread = {}
    handles = _handles(unread)
    info = _read(unread, "driver", smi.amdsmi_get_gpu_driver_info, handles[0]) if handles else None
    return {"driver": _known((info or {}).get("driver_version")), "cuda_driver": None, "unread": unread}


def snapshot() -> dict[str, Any]:
    """Everything the nvml check judges, GPU by GPU (AMD SMI order); needs init()."""
    data = driver_versions()
    data["gpus"] = [_gpu(i, h) for i, h in enumerate(_handles(data["unread"]))]
    return data


def _gpu(index: int, h: Any) -> dict[str, Any]:
    smi = _amdsmi()
    unread: Unread = {}

    def read(key: str, call: Callable[..., Any], *args: Any) -> Any:
        return _read(unread, key, call, h, *args)

    hotspot, vram, temp = smi.AmdSmiTemperatureType.HOTSPOT, smi.AmdSmiTemperatureType.VRAM, smi.AmdSmiTemperatureMetric
    ecc = read("ecc", smi.amdsmi_get_gpu_total_ecc_count)
    pages = read("bad_pages", smi.amdsmi_get_gpu_bad_page_info)
    clock = read("gfx_clock", smi.amdsmi_get_clock_info, smi.AmdSmiClkType.GFX) or {}
    gpu: dict[str, Any] = {
        **_identity(index, h, unread),
        "ras": None if ecc is None else {c: _number(ecc.get(f"{c}_count")) or 0 for c in RAS_CLASSES},
        "retired_pages_pending": None if pages is None else _count(pages, PAGE_PENDING),
        "bad_pages": None if pages is None else len(pages),
        "bad_pages_unreservable": None if pages is None else _count(pages, PAGE_UNRESERVABLE),
        "temperature": read("temperature", smi.amdsmi_get_temp_metric, hotspot, temp.CURRENT),
        "slowdown_temperature": read("slowdown_temperature", smi.amdsmi_get_temp_metric, hotspot, temp.CRITICAL),
        "memory_temperature": read("memory_temperature", smi.amdsmi_get_temp_metric, vram, temp.CURRENT),
        "memory_slowdown_temperature": read(
            "memory_slowdown_temperature", smi.amdsmi_get_temp_metric, vram, temp.CRITICAL
        ),
        "links": _xgmi(read("xgmi", smi.amdsmi_get_gpu_xgmi_link_status)),
        "processes": [p["pid"] for p in read("processes", smi.amdsmi_get_gpu_process_list) or []],
        "power": _power(read("power_cap", smi.amdsmi_get_power_cap_info), read("power", smi.amdsmi_get_power_info)),
        "thermal_limits": _thermal_limits(read("violation_status", smi.amdsmi_get_violation_status)),
        "sm_clock": _number(clock.get("clk")),
        "sm_clock_max": _number(clock.get("max_clk")),
    }
    gpu["unread"] = unread
    return gpu


def _count(pages: list[dict[str, Any]], status: int) -> int:
    return sum(1 for p in pages if p.get("status") == status)


def _number(value: Any) -> int | None:
    """AMD SMI says "N/A" where a value is its type's maximum (not read)."""
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


XGMI: tuple[tuple[LinkState, str], ...] = (("up", "U"), ("down", "D"))  # AMD SMI's letters; "X" is no link


def _xgmi(status: dict[str, Any] | None) -> dict[str, Any] | None:
    """The XGMI links AMD SMI reports up ("U") and down ("D"; "X" is disabled: not a link); None
    where unread."""
    if status is None:
        return None
    states = list(status.get("status") or [])
    links: dict[str, list[int]] = {s: [n for n, state in enumerate(states) if state == code] for s, code in XGMI}
    return {"kind": "xgmi", **links}


def _thermal_limits(status: dict[str, Any] | None) -> list[str] | None:
    """The thermal limits holding the clocks down now; None where unread. (The power limit, PPT,
    is normal for a busy GPU, as NVIDIA's SW power cap is: not listed.)"""
    if status is None:
        return None
    return [name for key, name in THERMAL_LIMITS.items() if status.get(key) is True]


def _power(cap: dict[str, Any] | None, info: dict[str, Any] | None) -> dict[str, int | None]:
    """The cap in force and the default (AMD SMI: microwatts on bare metal), the draw (watts), in mW."""
    cap, info = cap or {}, info or {}
    enforced, default = _number(cap.get("power_cap")), _number(cap.get("default_power_cap"))
    draw = _number(info.get("current_socket_power")) or _number(info.get("socket_power"))
    return {
        "enforced_mw": enforced // 1000 if enforced else None,
        "default_mw": default // 1000 if default else None,
        "usage_mw": draw * 1000 if draw is not None else None,
    }


# --- under load (the shape gpuenv.adapters.nvml's load_sample and violation counters give) --------

# AMD SMI's violation status (MI300 and later): each limit has an active_* flag (holding the clocks
# down now) and an acc_* residency counter that grows with acc_counter while the limit holds; as
# the causes every vendor's readings are judged by (gpuenv.adapters.nvml.CLOCK_CAUSES)
VIOLATION_LIMITS: dict[str, ClockCause] = {
    "prochot_thrm": "prochot",
    "ppt_pwr": "power_cap",
    "socket_thrm": "thermal",
    "vr_thrm": "vr_thermal",
    "hbm_thrm": "memory_thermal",
    "gfx_clk_below_host_limit": "configured",
}


def load_sample(indices: list[int]) -> dict[int, dict[str, Any]]:
    """One reading under load of these GPUs (AMD SMI index): the limits active now (`clock_events`,
    by name, and as `causes`; "idle" when the GFX engine is not busy), GFX clock (MHz), hotspot and
    memory temperature (°C), socket power (mW); an item the GPU cannot give is None, with the
    failure in `unread`. Needs init()."""
    smi = _amdsmi()
    node: Unread = {}
    handles = _handles(node)
    hotspot, vram = smi.AmdSmiTemperatureType.HOTSPOT, smi.AmdSmiTemperatureType.VRAM
    current = smi.AmdSmiTemperatureMetric.CURRENT
    found: dict[int, dict[str, Any]] = {}
    for i in indices:
        if i >= len(handles):
            found[i] = {"unread": dict(node)}
            continue
        h, unread = handles[i], Unread()
        active = _active(_read(unread, "violation_status", smi.amdsmi_get_violation_status, h))
        activity = _read(unread, "activity", smi.amdsmi_get_gpu_activity, h) or {}
        clock = _read(unread, "gfx_clock", smi.amdsmi_get_clock_info, h, smi.AmdSmiClkType.GFX) or {}
        info = _read(unread, "power", smi.amdsmi_get_power_info, h) or {}
        watts = _number(info.get("current_socket_power")) or _number(info.get("socket_power"))
        found[i] = {
            "clock_events": active,
            "causes": _causes(active, activity.get("gfx_activity")),
            "sm_clock": _number(clock.get("clk")),
            "temperature": _read(unread, "temperature", smi.amdsmi_get_temp_metric, h, hotspot, current),
            "memory_temperature": _read(unread, "memory_temperature", smi.amdsmi_get_temp_metric, h, vram, current),
            "power_mw": None if watts is None else watts * 1000,
            "unread": unread,
        }
    return found


def _active(status: dict[str, Any] | None) -> list[str] | None:
    """The limits AMD SMI's violation status says hold the clocks down now; None where unread."""
    if status is None:
        return None
    return [name for name in VIOLATION_LIMITS if status.get(f"active_{name}") is True]


def _causes(active: list[str] | None, gfx_activity: Any) -> list[str] | None:
    """The active limits as causes, and "idle" when the GFX engine was not busy at all."""
    if active is None:
        return None
    idle = ["idle"] if _number(gfx_activity) == 0 else []
    return sorted({VIOLATION_LIMITS[name] for name in active} | set(idle))


def violation_counters(indices: list[int]) -> dict[int, dict[str, Any]]:
    """The residency counters of these GPUs (AMD SMI index) by limit, with `counter` (acc_counter,
    the ticks they are a share of) and `unread`; a counter the GPU does not keep is left out. Needs
    init()."""
    smi = _amdsmi()
    node: Unread = {}
    handles = _handles(node)
    found: dict[int, dict[str, Any]] = {}
    for i in indices:
        unread: Unread = dict(node) if i >= len(handles) else {}
        status = {} if unread else _read(unread, "violation_status", smi.amdsmi_get_violation_status, handles[i])
        counters = {"counter": (status or {}).get("acc_counter")}
        counters |= {n: (status or {}).get(f"acc_{n}") for n in VIOLATION_LIMITS}
        read = {name: _number(value) for name, value in counters.items()}
        found[i] = {**{name: value for name, value in read.items() if value is not None}, "unread": unread}
    return found


# --- power caps, for gpuenv tune power (the shape gpuenv.adapters.nvml's power functions give) ----


class AmdSmiCallFailed(Exception):
    """An AMD SMI call that must succeed did not; `reason` as _error_name gives it (NO_PERMISSION, ...)."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what}: {reason}")
        self.reason = reason


def _must(what: str, call: Callable[[], Any]) -> Any:
    smi = _amdsmi()
    try:
        return call()
    except smi.AmdSmiException as exc:
        raise AmdSmiCallFailed(what, _error_name(exc)) from exc


def _handle(index: int) -> Any:
    handles = _must("listing the GPUs", _amdsmi().amdsmi_get_processor_handles)
    if not 0 <= index < len(handles):
        raise AmdSmiCallFailed(f"GPU {index}", "NOT_FOUND")
    return handles[index]


def _milliwatts(microwatts: Any) -> int | None:
    """AMD SMI's power caps are microwatts on bare metal; gpuenv's are milliwatts, as NVML's."""
    value = _number(microwatts)
    return None if value is None else value // 1000


POWER_CAP_FIELDS = {
    "min_mw": "min_power_cap",
    "max_mw": "max_power_cap",
    "default_mw": "default_power_cap",
    "limit_mw": "power_cap",
}


def power_limits() -> list[dict[str, Any]]:
    """Every GPU's power-cap range, default and cap in force (milliwatts), AMD SMI order; needs
    init(). A value the GPU cannot give is None, with the reason in `unknown`. A minimum of 0 is
    AMD SMI's answer where the GPU names no floor (MI300X): the caller chooses one."""
    smi = _amdsmi()
    found = []
    for i, h in enumerate(_handles({})):
        unread: Unread = {}
        cap = _read(unread, "power_cap", smi.amdsmi_get_power_cap_info, h) or {}
        limits = {key: _milliwatts(cap.get(field)) for key, field in POWER_CAP_FIELDS.items()}
        unknown = {key: f["code"] for key, f in unread.items()}
        found.append({**_identity(i, h, unread), **limits, "unknown": unknown})
    return found


def power_limit_mw(index: int) -> int:
    """The power cap in force on one GPU (AMD SMI index), milliwatts; raises AmdSmiCallFailed."""
    smi = _amdsmi()
    what = f"GPU {index}: reading its power cap"
    cap = _milliwatts(_must(what, partial(smi.amdsmi_get_power_cap_info, _handle(index))).get("power_cap"))
    if cap is None:
        raise AmdSmiCallFailed(what, "NOT_SUPPORTED")
    return cap


def set_power_limit_mw(index: int, milliwatts: int) -> None:
    """Set one GPU's power cap (root); the driver keeps it until reboot, reset or the next set."""
    smi = _amdsmi()
    h = _handle(index)
    what = f"GPU {index}: setting its power cap to {milliwatts / 1000:g} W"
    _must(what, partial(smi.amdsmi_set_power_cap, h, 0, int(milliwatts) * 1000))


def power_mw(indices: list[int]) -> dict[int, int | None]:
    """The socket power these GPUs (AMD SMI index) draw now (milliwatts), None where a GPU cannot say;
    needs init()."""
    return _each(indices, "power", _socket_mw)


def energy_mj(indices: list[int]) -> dict[int, float | None]:
    """These GPUs' energy accumulators (millijoules: the count times its resolution, in microjoules),
    None where a GPU keeps none; needs init()."""
    return _each(indices, "energy", _energy_mj)


def _socket_mw(h: Any, unread: Unread) -> int | None:
    info = _read(unread, "power", _amdsmi().amdsmi_get_power_info, h) or {}
    watts = _number(info.get("current_socket_power")) or _number(info.get("socket_power"))
    return None if watts is None else watts * 1000


def _energy_mj(h: Any, unread: Unread) -> float | None:
    counter = _read(unread, "energy", _amdsmi().amdsmi_get_energy_count, h)
    if not counter or _number(counter.get("energy_accumulator")) is None:
        return None
    return float(counter["energy_accumulator"]) * float(counter["counter_resolution"]) / 1000


def _each(indices: list[int], key: str, read: Callable[[Any, Unread], Any]) -> dict[int, Any]:
    """`read(handle, unread)` for each of these GPUs (AMD SMI index); None where it does not answer."""
    unread: Unread = {}
    handles = _handles(unread)
    return {i: read(handles[i], unread) if 0 <= i < len(handles) else None for i in indices}


CallFailed = AmdSmiCallFailed
