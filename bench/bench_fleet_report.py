"""`gpuenv fleet report --json` over 10,000 reports of 8-GPU nodes against a floor that only
json.loads the same files; targets: ratio <= 2.0 and peak RSS <= 1 GiB.

`python bench/bench_fleet_report.py [HOSTS [ROUNDS]]` (10,000 and 3 by default) measures at another
size; beside the rounds, one run without the GPU history (--no-history) says what recording every
report in a fresh history (the history's ingest) costs of the whole.

The reports are built with gpuenv's own report model (tests/fleet/fleet_reports.py: the nvml,
allreduce and amp checks with their per-GPU figures and the NVML snapshot), written once to a
temporary folder; then the command and the floor run interleaved, 3 rounds, medians. Peak RSS is
the command's own (wait4's ru_maxrss), the largest over the rounds. CPU time (user + system, the
command's with its reader processes) is printed beside: on a shared machine it varies less.
gpuenv's bytecode is compiled first, as installing gpuenv does (a checkout run with
PYTHONDONTWRITEBYTECODE set would otherwise compile every module at each start).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import compile_package, report

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fleet import fleet_reports  # noqa: E402

HOSTS = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
RSS_LIMIT_MIB = 1024
FLOOR = (
    "import json, os, sys\n"
    "for folder, dirs, files in os.walk(sys.argv[1]):\n"
    "    for name in files:\n"
    "        if name.endswith('.json'):\n"
    "            with open(os.path.join(folder, name), 'rb') as f:\n"
    "                json.loads(f.read())\n"
)


def measure(cmd: list[str]) -> tuple[float, int, str, float]:
    """(seconds, peak RSS in KiB, stdout, CPU seconds) of one run, reaped with wait4 to read its own usage."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd[:6])} exited {proc.returncode}")
    return seconds, usage.ru_maxrss, out.decode(), usage.ru_utime + usage.ru_stime


def main() -> int:
    compile_package()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "reports"
        start = time.perf_counter()
        rng = random.Random(3)  # the nodes made one at a time: a large fleet is never all in memory here
        fleet_reports.write((fleet_reports.healthy_node(f"gpu{i:06d}", rng) for i in range(HOSTS)), folder)
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(f"wrote {HOSTS} reports ({size / 2**20:.0f} MiB) in {time.perf_counter() - start:.1f}s")
        command = [sys.executable, "-m", "gpuenv", "fleet", "report", str(folder), "--json"]
        floor = [sys.executable, "-c", FLOOR, str(folder)]
        times: dict[str, list[float]] = {"report": [], "floor": []}
        cpu: dict[str, list[float]] = {"report": [], "floor": []}
        peak = 0
        for n in range(ROUNDS):  # a fresh GPU history each round: every report is recorded, none found there
            seconds, rss, out, used = measure([*command, "--history", str(Path(tmp) / f"history-{n}.sqlite")])
            times["report"].append(seconds)
            cpu["report"].append(used)
            peak = max(peak, rss)
            seconds, _, _, used = measure(floor)
            times["floor"].append(seconds)
            cpu["floor"].append(used)
        result = json.loads(out)
        alone, _, _, alone_cpu = measure([*command, "--no-history"])
    assert len(result["hosts"]) == HOSTS and not result["skipped"], "the command did not read every report"
    medians = {name: statistics.median(values) for name, values in times.items()}
    ok = report(f"fleet report --json over {HOSTS} reports", medians["report"], medians["floor"], target=2.0)
    cpus = {name: statistics.median(values) for name, values in cpu.items()}
    ratio = cpus["report"] / cpus["floor"]
    print(f"CPU time: {cpus['report']:.3f}s vs {cpus['floor']:.3f}s -> {ratio:.2f} (not a target)")
    rss_ok = peak / 1024 <= RSS_LIMIT_MIB
    print(f"peak RSS {peak / 1024:.0f} MiB (target <= {RSS_LIMIT_MIB} MiB) {'ok' if rss_ok else 'OVER TARGET'}")
    print(f"outliers in the clean fleet: {len(result['outliers'])}")
    ingest = cpus["report"] - alone_cpu
    print(
        f"without the history: {alone:.2f} s ({alone_cpu:.2f} s CPU); the history's ingest of {HOSTS} reports "
        f"about {ingest:.2f} s of the {cpus['report']:.2f} s CPU ({ingest / HOSTS * 1e6:.0f} µs a report)"
    )
    return 0 if ok and rss_ok else 1


if __name__ == "__main__":
    sys.exit(main())
