"""What each AMD SMI status means for each call the nvml check makes on AMD GPUs
(gpuenv/adapters/amdsmi.py), as one of gpuenv.types.ErrorClass, as NVML's table does
(gpuenv/adapters/nvml_errors.py):

- `lost`: the GPU no longer answers, whatever the call: an I/O error on the device's files (IO), libdrm
  failing on it (DRM_ERROR), or the driver's failed restart (AMDGPU_RESTART_ERR);
- `absent`: an answer this call gives on a healthy GPU, listed per call below: NOT_SUPPORTED (and
  NOT_YET_IMPLEMENTED) for a reading the model, firmware or a virtual function lacks;
- `failed`: anything else (UNKNOWN_ERROR, TIMEOUT, NO_PERM, BUSY, a code this table does not know).
"""

from __future__ import annotations

from gpuenv.types import ErrorClass

# amdsmi_status_t, by value (amdsmi.h): the names findings give, without AMDSMI_STATUS_
CODES = {
    1: "INVAL",
    2: "NOT_SUPPORTED",
    3: "NOT_YET_IMPLEMENTED",
    4: "FAIL_LOAD_MODULE",
    5: "FAIL_LOAD_SYMBOL",
    6: "DRM_ERROR",
    7: "API_FAILED",
    8: "TIMEOUT",
    9: "RETRY",
    10: "NO_PERM",
    11: "INTERRUPT",
    12: "IO",
    13: "ADDRESS_FAULT",
    14: "FILE_ERROR",
    15: "OUT_OF_RESOURCES",
    16: "INTERNAL_EXCEPTION",
    17: "INPUT_OUT_OF_BOUNDS",
    18: "INIT_ERROR",
    30: "BUSY",
    31: "NOT_FOUND",
    32: "NOT_INIT",
    34: "DRIVER_NOT_LOADED",
    40: "NO_DATA",
    41: "INSUFFICIENT_SIZE",
    42: "UNEXPECTED_SIZE",
    43: "UNEXPECTED_DATA",
    52: "FILE_NOT_FOUND",
    54: "AMDGPU_RESTART_ERR",
    55: "SETTING_UNAVAILABLE",
    56: "CORRUPTED_EEPROM",
    0xFFFFFFFE: "MAP_ERROR",
    0xFFFFFFFF: "UNKNOWN_ERROR",
}
LOST = frozenset({"IO", "DRM_ERROR", "AMDGPU_RESTART_ERR"})

_MODEL = frozenset({"NOT_SUPPORTED", "NOT_YET_IMPLEMENTED"})  # a reading some models or firmware lack

NORMAL: dict[str, frozenset[str]] = {
    "amdsmi_get_processor_handles": frozenset(),
    # who each GPU is
    "amdsmi_get_gpu_asic_info": frozenset(),
    "amdsmi_get_gpu_board_info": _MODEL,  # boards without a FRU record
    "amdsmi_get_gpu_device_bdf": frozenset(),
    "amdsmi_get_gpu_device_uuid": frozenset(),
    "amdsmi_get_gpu_driver_info": frozenset(),
    # memory errors
    "amdsmi_get_gpu_total_ecc_count": _MODEL,  # RAS off, or no ECC memory
    "amdsmi_get_gpu_bad_page_info": _MODEL,
    # links, clocks, power, heat
    "amdsmi_get_gpu_xgmi_link_status": _MODEL,  # a GPU without XGMI
    "amdsmi_get_clock_info": frozenset(),
    "amdsmi_get_gpu_activity": _MODEL,
    "amdsmi_get_violation_status": _MODEL,  # before MI300
    "amdsmi_get_temp_metric": _MODEL,  # a sensor the model lacks (the memory's on some boards)
    "amdsmi_get_power_cap_info": _MODEL,
    "amdsmi_get_power_info": _MODEL,
    # use
    "amdsmi_get_gpu_process_list": frozenset(),
}


def code_name(code: object) -> str:
    """AMD SMI's name for a status ("IO"), else "AMD SMI error N"."""
    return CODES.get(code, f"AMD SMI error {code}") if isinstance(code, int) else f"AMD SMI error {code}"


def classify(call: str, code: str) -> ErrorClass:
    """Pure: what `code` (a name from CODES) answered by `call` means."""
    if code in LOST:
        return "lost"
    return "absent" if code in NORMAL.get(call, frozenset()) else "failed"
