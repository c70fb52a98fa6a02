"""Speed of `gpuenv verify --check nvml --passive`, against the floor of pynvml doing the same reads.

Over 8 GPUs of the fake libnvidia-ml.so.1 (tests/verify/fake_nvml, built here with gcc, scenario
healthy-8xh100), measured interleaved in one run, medians compared:
  passive  gpuenv verify --check nvml --passive --json
  floor    python -c: import pynvml, nvmlInit, and the same reads for every GPU
  full     gpuenv verify --check nvml --json (the worker, the probe, the load process): reported
           beside it, not a target
  help     gpuenv --help: gpuenv's start-up alone (Click, the config file), for scale
Each run is timed with timing.wall's blocking wait.
Target: passive / floor <= 3. Usage: .venv/bin/python bench/bench_nvml_passive.py [--rounds N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import compile_package, fake_nvml, median_each, report, samples

TARGET = 3.0

FLOOR = r"""
import pynvml as nv
nv.nvmlInit()
def read(call, *args):
    try:
        return call(*args)
    except nv.NVMLError:
        return None
nv.nvmlSystemGetDriverVersion(); nv.nvmlSystemGetCudaDriverVersion()
for i in range(nv.nvmlDeviceGetCount()):
    h = nv.nvmlDeviceGetHandleByIndex(i)
    for call, args in (
        (nv.nvmlDeviceGetName, ()), (nv.nvmlDeviceGetUUID, ()), (nv.nvmlDeviceGetSerial, ()),
        (nv.nvmlDeviceGetPciInfo, ()), (nv.nvmlDeviceGetCudaComputeCapability, ()),
        (nv.nvmlDeviceGetTotalEccErrors, (nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)),
        (nv.nvmlDeviceGetRetiredPagesPendingStatus, ()), (nv.nvmlDeviceGetRemappedRows, ()),
        (nv.nvmlDeviceGetCurrPcieLinkGeneration, ()), (nv.nvmlDeviceGetMaxPcieLinkGeneration, ()),
        (nv.nvmlDeviceGetCurrPcieLinkWidth, ()), (nv.nvmlDeviceGetMaxPcieLinkWidth, ()),
        (nv.nvmlDeviceGetCurrentClocksEventReasons, ()), (nv.nvmlDeviceGetPersistenceMode, ()),
        (nv.nvmlDeviceGetTemperature, (nv.NVML_TEMPERATURE_GPU,)),
        (nv.nvmlDeviceGetTemperatureThreshold, (nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,)),
        (nv.nvmlDeviceGetComputeRunningProcesses, ()), (nv.nvmlDeviceGetMemoryInfo, (nv.nvmlMemory_v2,)),
        (nv.nvmlDeviceGetMigMode, ()), (nv.nvmlDeviceGetComputeMode, ()),
        (nv.nvmlDeviceGetEnforcedPowerLimit, ()), (nv.nvmlDeviceGetPowerManagementDefaultLimit, ()),
        (nv.nvmlDeviceGetPowerUsage, ()), (nv.nvmlDeviceGetClockInfo, (nv.NVML_CLOCK_SM,)),
        (nv.nvmlDeviceGetMaxClockInfo, (nv.NVML_CLOCK_SM,)),
        (nv.nvmlDeviceGetApplicationsClock, (nv.NVML_CLOCK_SM,)),
        (nv.nvmlDeviceGetDefaultApplicationsClock, (nv.NVML_CLOCK_SM,)),
        (nv.nvmlDeviceGetTemperatureThreshold, (nv.NVML_TEMPERATURE_THRESHOLD_MEM_MAX,)),
        (nv.nvmlDeviceGetFieldValues, ([nv.NVML_FI_DEV_MEMORY_TEMP],)),
    ):
        read(call, h, *args)
    for link in range(18):
        if read(nv.nvmlDeviceGetNvLinkState, h, link) is None:
            break
"""


def main() -> int:
    compile_package()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**fake_nvml(Path(tmp)), "GPUENV_POWER_RECORD": str(Path(tmp) / "power-applied.json")}
        gpuenv = [sys.executable, "-m", "gpuenv", "verify", "--check", "nvml", "--json"]
        commands = {
            "floor": [sys.executable, "-c", FLOOR],
            "passive": [*gpuenv, "--passive"],
            "help": [sys.executable, "-m", "gpuenv", "--help"],  # gpuenv's start-up alone, for scale
            "full": gpuenv,
        }
        times = samples(commands, runs=args.rounds, env=env, most={"full": 3})  # the full check: a few runs suffice
    med = median_each(times)
    for name in ("floor", "passive", "help"):
        print(f"{name}: min {min(times[name]):.3f}s, median {med[name]:.3f}s, max {max(times[name]):.3f}s")
    print(f"gpuenv --help (not a target): {med['help']:.3f}s, {med['help'] / med['floor']:.2f}x the floor")
    print(f"full nvml check (not a target): {med['full']:.3f}s, {med['full'] / med['floor']:.1f}x the floor")
    return 0 if report("verify --check nvml --passive", med["passive"], med["floor"], TARGET) else 1


if __name__ == "__main__":
    sys.exit(main())
