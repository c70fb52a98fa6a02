"""What each NVML return code means for each call the nvml check makes (gpuenv/adapters/nvml.py),
as one of gpuenv.types.ErrorClass:

- `lost`: GPU_IS_LOST, RESET_REQUIRED or IRQ_ISSUE, whatever the call: the GPU no longer answers;
- `absent`: an answer this call gives on a healthy GPU, listed per call below: NOT_SUPPORTED for a
  reading the model lacks, FUNCTION_NOT_FOUND for one an older driver lacks, TIMEOUT for the XID
  wait's "no event", INVALID_ARGUMENT past a GPU's last NVLink;
- `failed`: anything else (UNKNOWN, TIMEOUT on a reading, NO_PERMISSION, LIB_RM_VERSION_MISMATCH, a
  code this table does not know). A call that is not listed has no normal failure: it fails closed.
"""

from __future__ import annotations

from gpuenv.types import ErrorClass

LOST = frozenset({"GPU_IS_LOST", "RESET_REQUIRED", "IRQ_ISSUE"})

_MODEL = frozenset({"NOT_SUPPORTED"})  # a reading some models or boards lack
_DRIVER = frozenset({"NOT_SUPPORTED", "FUNCTION_NOT_FOUND"})  # and older drivers lack the call

NORMAL: dict[str, frozenset[str]] = {
    # the node
    "nvmlSystemGetDriverVersion": frozenset(),
    "nvmlSystemGetCudaDriverVersion": frozenset(),
    "nvmlDeviceGetCount": frozenset(),
    "nvmlEventSetCreate": _MODEL,  # XID events are not delivered everywhere (some virtual GPUs)
    "nvmlEventSetWait_v2": frozenset({"TIMEOUT"}),  # no event waiting
    # who each GPU is
    "nvmlDeviceGetHandleByIndex": frozenset(),
    "nvmlDeviceGetName": frozenset(),
    "nvmlDeviceGetUUID": frozenset(),
    "nvmlDeviceGetSerial": _MODEL,  # boards without a serial number in their InfoROM
    "nvmlDeviceGetPciInfo": frozenset(),
    "nvmlDeviceGetCudaComputeCapability": frozenset(),
    "nvmlDeviceRegisterEvents": _MODEL,
    # memory errors
    "nvmlDeviceGetTotalEccErrors": _MODEL,  # ECC off, or memory without ECC
    "nvmlDeviceGetRetiredPagesPendingStatus": _MODEL,  # Ampere and later remap rows instead
    "nvmlDeviceGetRemappedRows": _DRIVER,  # before Ampere, pages are retired instead
    # links
    "nvmlDeviceGetCurrPcieLinkGeneration": _MODEL,  # a GPU passed through to a VM may hide its link
    "nvmlDeviceGetMaxPcieLinkGeneration": _MODEL,
    "nvmlDeviceGetCurrPcieLinkWidth": _MODEL,
    "nvmlDeviceGetMaxPcieLinkWidth": _MODEL,
    "nvmlDeviceGetNvLinkState": frozenset({"NOT_SUPPORTED", "INVALID_ARGUMENT"}),  # no NVLink; past the last
    "nvmlDeviceGetGpuFabricInfoV": _DRIVER,  # no NVSwitch fabric; before R550
    # clocks, power, heat
    "nvmlDeviceGetCurrentClocksEventReasons": _MODEL,
    "nvmlDeviceGetClockInfo": frozenset(),
    "nvmlDeviceGetMaxClockInfo": frozenset(),
    "nvmlDeviceGetApplicationsClock": _MODEL,
    "nvmlDeviceGetDefaultApplicationsClock": _MODEL,
    "nvmlDeviceGetViolationStatus": _MODEL,  # counters some GPUs do not keep
    "nvmlDeviceGetPersistenceMode": _MODEL,
    "nvmlDeviceGetTemperature": frozenset(),
    "nvmlDeviceGetTemperatureThreshold": _MODEL,  # the memory limit on GPUs without HBM sensors
    "nvmlDeviceGetFieldValues": _DRIVER,  # memory temperature, recovery action: by model and driver
    "nvmlDeviceGetEnforcedPowerLimit": _MODEL,
    "nvmlDeviceGetPowerManagementDefaultLimit": _MODEL,
    "nvmlDeviceGetPowerUsage": _MODEL,
    # use
    "nvmlDeviceGetComputeRunningProcesses": frozenset(),
    "nvmlDeviceGetMemoryInfo": frozenset({"FUNCTION_NOT_FOUND", "ARGUMENT_VERSION_MISMATCH"}),  # v2 needs R510+
    "nvmlDeviceGetMigMode": _MODEL,
    "nvmlDeviceGetComputeMode": _MODEL,
}


def classify(call: str, code: str) -> ErrorClass:
    """Pure: what `code` (NVML's name without NVML_ERROR_) answered by `call` means."""
    if code in LOST:
        return "lost"
    return "absent" if code in NORMAL.get(call, frozenset()) else "failed"
