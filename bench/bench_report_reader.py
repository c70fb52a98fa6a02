"""The verify report reader (gpuenv/verify/reportfile.py, msgspec Structs) against the parsers it
replaced, over the same 10,000 reports of 8-GPU nodes held in memory (no file system in the way).

Measured in one process, interleaved, 5 rounds, medians; wall and CPU time (the machine is shared):
- json: `json.loads` to dicts (the fleet report bench's floor);
- orjson: `orjson.loads` to dicts (the fleet report's parser before the reader, with the `fast` extra);
- reader: `reportfile.decode` to the typed report, validated;
- reader, NaN: the same reports each holding a NaN (as Python's json wrote non-finite figures before
  gpuenv wrote null), which the reader reads again through json and converts: the rare slow path.
Also what the fleet report keeps of each (`host_report`), from the typed report. No target: the
fleet report's own target (bench_fleet_report.py, <= 2.0x its json.loads floor) is the one that counts.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpuenv.fleet.report_reading import host_report  # noqa: E402
from gpuenv.verify import reportfile  # noqa: E402
from tests.fleet import fleet_reports  # noqa: E402

HOSTS = 10_000
ROUNDS = 5


def timed(parse: Callable[[bytes], Any], reports: list[bytes]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of parsing every report."""
    wall, cpu = time.perf_counter(), time.process_time()
    for raw in reports:
        parse(raw)
    return time.perf_counter() - wall, time.process_time() - cpu


def keep(raw: bytes) -> Any:
    report = reportfile.decode(raw)
    assert isinstance(report, reportfile.VerifyReport)
    return host_report(report, "x.json")


def main() -> int:
    docs = [fleet_reports.report(n) for n in fleet_reports.fleet(HOSTS, seed=3)]
    plain = [json.dumps(d).encode() for d in docs]
    for d in docs:
        d["checks"][2]["metrics"]["note"] = float("nan")
    with_nan = [json.dumps(d).encode() for d in docs]
    print(f"{HOSTS} reports, {sum(map(len, plain)) / 2**20:.0f} MiB")
    ways: dict[str, tuple[Callable[[bytes], Any], list[bytes]]] = {
        "json": (json.loads, plain),
        "reader": (reportfile.decode, plain),
        "reader + host_report": (keep, plain),
        "reader, NaN": (reportfile.decode, with_nan),
    }
    try:
        import orjson  # the `fast` extra

        ways["orjson"] = (orjson.loads, plain)
    except ImportError:
        print("orjson not installed (the `fast` extra): left out")
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for _ in range(ROUNDS):
        for name, (parse, reports) in ways.items():
            samples[name].append(timed(parse, reports))
    wall = {name: statistics.median(s[0] for s in runs) for name, runs in samples.items()}
    cpu = {name: statistics.median(s[1] for s in runs) for name, runs in samples.items()}
    print(f"medians of {ROUNDS} interleaved rounds")
    print(f"{'':22} {'wall':>8} {'cpu':>8} {'cpu/json':>9} {'cpu/orjson':>11}")
    for name in ways:
        vs_orjson = f"{cpu[name] / cpu['orjson']:11.2f}" if "orjson" in cpu else f"{'-':>11}"
        print(f"{name:22} {wall[name]:7.3f}s {cpu[name]:7.3f}s {cpu[name] / cpu['json']:9.2f} {vs_orjson}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
