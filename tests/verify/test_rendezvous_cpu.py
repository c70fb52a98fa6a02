"""Where one node's ranks meet, with real torch ranks on the CPU (gloo)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu  # real torch in child processes: nox -s cpu

# The worker's side of a run: the store's port is listening before any rank has started, the ranks
# meet there, and the store is let go once they have left.
MEET = """
import json, socket
from gpuenv.verify import ranks

if __name__ == "__main__":
    plan = {"sizes": [1 << 16], "iters": 1, "warmup": 0, "collectives": ["allreduce"]}
    run = ranks.start("gpuenv.verify.checks.allreduce.workload:rank_workload", check="allreduce", world=2,
                      device="cpu", params=plan)
    port = run.server.port
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    results = run.results()
    print(json.dumps({"port": port, "ranks": len(results), "released": run.server is None}))
"""


def test_one_nodes_ranks_meet_at_a_store_the_worker_bound_before_they_started(tmp_path: Path) -> None:
    """A port probed free and bound later by rank 0 can be taken in between, failing a healthy node."""
    script = tmp_path / "meet.py"
    script.write_text(MEET)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["port"] > 0 and seen["ranks"] == 2 and seen["released"] is True
