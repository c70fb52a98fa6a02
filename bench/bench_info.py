"""Speed of `gpuenv info --json`, against the floor of pynvml init plus the GPUs' name reads.

Over 8 GPUs of the fake libnvidia-ml.so.1 (tests/verify/fake_nvml, built here with gcc, scenario
healthy-8xh100), measured interleaved in one run, medians compared:
  info   gpuenv info --json (NVML identities, torch's version from metadata, the resolved stack)
  floor  python -c: import pynvml, nvmlInit, the driver version and every GPU's name
Target: info / floor <= 3 (torch is never imported: tests/verify/test_ux_info.py checks it).
Usage: .venv/bin/python bench/bench_info.py [--rounds N]
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
nv.nvmlSystemGetDriverVersion()
for i in range(nv.nvmlDeviceGetCount()):
    nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(i))
"""


def main() -> int:
    compile_package()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = fake_nvml(Path(tmp))
        commands = {"floor": [sys.executable, "-c", FLOOR], "info": [sys.executable, "-m", "gpuenv", "info", "--json"]}
        times = samples(commands, runs=args.rounds, env=env)
    med = median_each(times)
    return 0 if report("info --json", med["info"], med["floor"], TARGET) else 1


if __name__ == "__main__":
    sys.exit(main())
