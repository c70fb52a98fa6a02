"""`gpuenv fleet compat DIR --torch 2.7.0+cu128 --json` (and with `--on-host`: judged on each host's OS and Python
too) against `gpuenv fleet report DIR --json --no-history` over the same 10,000 reports of 8-GPU nodes; target:
each ratio <= 2.0.

`python bench/bench_fleet_compat.py [HOSTS [ROUNDS]]` (10,000 and 3 by default). The reports are the kinds of
tests/fleet/compat_fleet.py (V100, A100, H100, B200, RTX 5090 and MI300X nodes, drivers R470 to R580, on
Ubuntu 22.04, Rocky Linux 9 or Debian 12 in turn) named gpu000000…, written once to a temporary folder; the
commands run interleaved, medians compared. All read every report through the same reader
(gpuenv.fleet.report_reading, worker processes for many); fleet compat then judges each kind of host once, fleet
report compares the figures. gpuenv's bytecode is compiled first.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import compile_package, report

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fleet import compat_fleet  # noqa: E402

HOSTS = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3


def run(cmd: list[str]) -> tuple[float, str]:
    """Seconds and stdout of one run; 0 and 1 are verdicts (a host does not run the stack), anything else fails."""
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd[3:6])} exited {done.returncode}: {done.stderr[-400:]}")
    return time.perf_counter() - start, done.stdout


def main() -> int:
    compile_package()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "reports"
        folder.mkdir()
        start = time.perf_counter()
        kinds, oses = compat_fleet.FLEET, (("ubuntu22.04", "3.10"), ("rockylinux9", "3.11"), ("debian12", "3.11"))
        for i in range(HOSTS):
            os, python = oses[i % len(oses)]
            spec = kinds[i % len(kinds)]._replace(host=f"gpu{i:06d}", os=os, python=python)
            (folder / f"{spec.host}.json").write_text(json.dumps(compat_fleet.report(spec, gpus=8)))
        print(f"wrote {HOSTS} reports in {time.perf_counter() - start:.1f}s")
        commands = {
            "compat": [
                sys.executable,
                "-m",
                "gpuenv",
                "fleet",
                "compat",
                str(folder),
                "--torch",
                "2.7.0+cu128",
                "--json",
            ],
            "report": [sys.executable, "-m", "gpuenv", "fleet", "report", str(folder), "--json", "--no-history"],
        }
        commands["compat --on-host"] = [*commands["compat"], "--on-host"]
        times: dict[str, list[float]] = {name: [] for name in commands}
        counts: dict[str, dict[str, int]] = {}
        for _ in range(ROUNDS):
            for name, cmd in commands.items():
                seconds, out = run(cmd)
                times[name].append(seconds)
                if name.startswith("compat"):
                    counts[name] = json.loads(out)["counts"]
                    assert sum(counts[name].values()) == HOSTS, counts
        print("\n".join(f"{name} counts: {said}" for name, said in counts.items()))
        print("rounds: " + ", ".join(f"{name} {seconds}" for name, seconds in times.items()))
        fleet = statistics.median(times["report"])
        ok = [
            report(f"fleet {name} over {HOSTS} reports", statistics.median(times[name]), fleet, target=2.0)
            for name in ("compat", "compat --on-host")
        ]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
