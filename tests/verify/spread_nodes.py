"""Several single-rank "nodes" on this machine, each its own `gpuenv verify --check allreduce` process
started with torchrun's environment (RANK, WORLD_SIZE, GROUP_RANK, MASTER_ADDR ...) and a node name of
its own: what a launcher does across real nodes, one rank per node. Used by the localisation tests and
bench/bench_localise.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import free_port

CPU_BASELINE = {  # an expectation no CPU meets: the collective is always under it, the search always runs
    "schema": "gpuenv.baselines/2",
    "fail_below": 0.75,
    "warn_below": 0.9,
    "matmul_tflops": [],
}


@dataclass(frozen=True)
class Node:
    name: str
    code: int
    report: dict[str, Any]
    stderr: str

    @property
    def allreduce(self) -> dict[str, Any]:
        return next(c for c in self.report["checks"] if c["name"] == "allreduce")

    @property
    def localisation(self) -> dict[str, Any]:
        found: dict[str, Any] = self.report["multi_node"]["localisation"]
        return found

    def codes(self) -> dict[str, str]:
        return {f["code"]: f["severity"] for f in self.allreduce["findings"]}


def baseline(tmp: Path, *, ranks: int, gbps: float = 1000.0) -> Path:
    """A baseline file expecting `gbps` of busbw from `ranks` CPU ranks."""
    row = {"match": ["cpu"], "gpus": ranks, "collective": "allreduce", "min_bytes": 1, "busbw_gbps": gbps}
    path = tmp / "cpu-baseline.json"
    path.write_text(json.dumps({**CPU_BASELINE, "busbw": [row]}))
    return path


def run_nodes(
    tmp: Path,
    count: int,
    *args: str,
    env: dict[str, str],
    device: str = "cpu",
    timeout: float = 600,
    master_addr: str = "127.0.0.1",
    prefix: Callable[[int], list[str]] = lambda rank: [],
) -> list[Node]:
    """`count` nodes n1..nN, one rank each, every one's exit code and report (in node order); `prefix`
    starts a rank's command (e.g. in a network namespace of its own), `master_addr` is where rank 0 is."""
    port, procs = free_port(), []
    for rank in range(count):
        launcher = {
            "RANK": str(rank),
            "WORLD_SIZE": str(count),
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "GROUP_RANK": str(rank),
            "GROUP_WORLD_SIZE": str(count),
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(port),
            "TORCHELASTIC_RUN_ID": f"localise-{port}",
        }
        if device == "cuda":
            launcher["CUDA_VISIBLE_DEVICES"] = str(rank)  # each "node" its own GPU
        command = [*prefix(rank), sys.executable, "-m", "gpuenv", "verify", "--check", "allreduce", "--device", device]
        command += ["--node-name", f"n{rank + 1}", "--report", str(tmp / f"n{rank + 1}.json"), *args]
        full_env = {**os.environ, **env, **launcher, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env))
    nodes = []
    try:
        for rank, proc in enumerate(procs):
            _, stderr = proc.communicate(timeout=timeout)
            path = tmp / f"n{rank + 1}.json"
            report = json.loads(path.read_text()) if path.exists() else {}
            nodes.append(Node(f"n{rank + 1}", proc.returncode, report, stderr))
    finally:
        for proc in procs:  # a node past its time is stopped, never left behind
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return nodes
