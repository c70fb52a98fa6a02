"""Speed of `gpuenv verify`, measured against floors in the same run.

1. Wall time of `gpuenv verify --level quick --device cpu` against a floor script that imports
   torch once and runs one 2-rank gloo allreduce with mp.spawn (target: ratio <= 2.0).
2. The busbw verify reports for its 64 MiB gloo allreduce against an independent measurement
   (mp.spawn, 2 ranks, the nccl-tests busbw definition) in the same run (target: within 15%).

Runs alternate (floor, verify, floor, verify, ...) so both see the same machine; medians are
compared; exits 1 when a target is missed. Usage: .venv/bin/python bench/bench_verify.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLOOR = r"""
import sys
import torch, torch.distributed as dist, torch.multiprocessing as mp

def run(rank, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    x = torch.ones(16 * 1024 * 1024)
    dist.all_reduce(x)
    assert x[0].item() == 2
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(run, args=(int(sys.argv[1]),), nprocs=2)
"""

BUSBW = r"""
import sys, time, json
import torch, torch.distributed as dist, torch.multiprocessing as mp

def run(rank, port, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    x = torch.ones(16 * 1024 * 1024)
    times = []
    for i in range(4):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - t0)
    mean = sum(times[1:]) / 3
    if rank == 0:
        open(out, "w").write(json.dumps({"busbw_gbps": 64 * 2**20 / mean / 1e9 * 2 * (2 - 1) / 2}))
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(run, args=(int(sys.argv[1]), sys.argv[2]), nprocs=2)
"""


def timed(cmd: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0,):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    work = Path(tempfile.mkdtemp(prefix="gpuenv-bench-"))
    (work / "floor.py").write_text(FLOOR)
    (work / "busbw.py").write_text(BUSBW)
    floors, verifies, ours, theirs = [], [], [], []
    for i in range(rounds):
        port = 29600 + i
        floors.append(timed([sys.executable, str(work / "floor.py"), str(port)])[0])
        verify_cmd = [sys.executable, "-m", "gpuenv", "verify", "--level", "quick", "--device", "cpu", "--json"]
        elapsed, out = timed(verify_cmd)
        verifies.append(elapsed)
        report = json.loads(out)
        allreduce = next(c for c in report["checks"] if c["name"] == "allreduce")
        row = next(r for r in allreduce["metrics"]["sizes"] if r["bytes"] == 64 << 20)
        ours.append(row["busbw_gbps"])
        result = work / f"busbw{i}.json"
        timed([sys.executable, str(work / "busbw.py"), str(port + 50), str(result)])
        theirs.append(json.loads(result.read_text())["busbw_gbps"])
    floor, verify = statistics.median(floors), statistics.median(verifies)
    mine, indep = statistics.median(ours), statistics.median(theirs)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, rounds {rounds}")
    print(f"floor (import torch + 2-rank gloo allreduce, mp.spawn): median {floor:.2f} s  {_all(floors)}")
    print(f"gpuenv verify --level quick --device cpu:               median {verify:.2f} s  {_all(verifies)}")
    print(f"ratio verify / floor: {verify / floor:.2f}  (target <= 2.0)")
    print(f"busbw 64 MiB gloo, gpuenv: median {mine:.3f} GB/s  {_all(ours)}")
    print(f"busbw 64 MiB gloo, independent: median {indep:.3f} GB/s  {_all(theirs)}")
    print(f"busbw difference: {abs(mine - indep) / indep:.1%}  (target <= 15%)")
    if verify / floor > 2.0 or abs(mine - indep) / indep > 0.15:
        raise SystemExit(1)


def _all(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in values) + "]"


if __name__ == "__main__":
    main()
