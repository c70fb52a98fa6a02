"""verify --check allreduce across ranks started by a launcher (torchrun) or by explicit flags, with
real torch (gloo) on this machine: the report's multi_node object, rank 0's job summary, a corrupted
element that names its node, and a frozen (SIGSTOPped) peer that ends as a timeout naming it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpuenv.resources import data_file
from tests.conftest import REPO, require
from tests.verify.conftest import check
from tests.verify.test_faults import marked_env, processes_with

pytestmark = [pytest.mark.slow, pytest.mark.cpu]
SCHEMA = json.loads(data_file("report.schema.json").read_text())


def torchrun(*args: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("torchrun") or str(REPO / ".venv/bin/torchrun")
    require(Path(exe).exists(), "torchrun is not installed (pip install 'gpuenv[verify]')")
    command = [exe, "--standalone", "--nproc-per-node", "2", "-m", "gpuenv", "verify", "--check", "allreduce"]
    return subprocess.run(
        [*command, "--device", "cpu", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**_env(), **env},
        check=False,
    )


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}


def no_leftovers(mark: str, within: float = 15) -> list[int]:
    deadline = time.monotonic() + within
    while processes_with(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    return processes_with(mark)


def test_torchrun_two_ranks_report_the_node_and_rank_0_writes_the_job_summary(tmp_path: Path) -> None:
    env, mark = marked_env("")
    env["NCCL_SOCKET_IFNAME"] = "lo"  # passed through and recorded, as NCCL_IB_HCA, NCCL_DEBUG, ...
    report_path, summary_path = tmp_path / "node.json", tmp_path / "job.json"
    proc = torchrun("--report", str(report_path), "--job-summary", str(summary_path), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(report_path.read_text())
    jsonschema.validate(report, SCHEMA)
    multi = report["multi_node"]
    assert multi["launcher"] == "torchrun" and multi["world"] == 2 and multi["nnodes"] == 1
    assert multi["comm_env"]["NCCL_SOCKET_IFNAME"] == "lo"
    node = report["host"]["hostname"]
    assert multi["nodes"] == [{"node": node, "ranks": [0, 1]}]
    assert multi["intra_node"][node]["busbw_gbps"] > 0 and multi["inter_node"] is None
    allreduce = check(report, "allreduce")
    assert allreduce["status"] == "pass" and allreduce["metrics"]["intra_node_busbw_gbps"] > 0
    assert "one node: nothing crosses nodes" in allreduce["summary"]
    summary = json.loads(summary_path.read_text())
    assert summary["schema"] == "gpuenv.verify-job/1" and summary["world"] == 2
    assert summary["verdict"]["certified"] and summary["nodes"] == multi["nodes"]
    assert proc.stdout.count("certified (CPU only)") == 1  # one process per node presents the report
    assert not no_leftovers(mark)


def explicit_node(rank: int, port: int, tmp: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    args = ["--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port)]
    return subprocess.Popen(
        [sys.executable, "-m", "gpuenv", "verify", "--check", "allreduce", "--device", "cpu", *args,
         "--node-name", f"n{rank + 1}", "--report", str(tmp / f"n{rank + 1}.json"), "--timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**_env(), **env},
    )  # fmt: skip


def test_explicit_flags_two_nodes_a_corrupted_element_names_its_node(tmp_path: Path) -> None:
    from tests.conftest import free_port

    env, mark = marked_env("allreduce:corrupt:rank3")  # node n2's second rank
    nodes = [explicit_node(r, free_port(), tmp_path, env) for r in (0,)]
    nodes.append(explicit_node(1, int(nodes[0].args[nodes[0].args.index("--master-port") + 1]), tmp_path, env))
    outcomes = [p.communicate(timeout=300) for p in nodes]
    assert [p.returncode for p in nodes] == [1, 1], [o[1][-2000:] for o in outcomes]
    for name in ("n1", "n2"):
        report = json.loads((tmp_path / f"{name}.json").read_text())
        jsonschema.validate(report, SCHEMA)
        multi: dict[str, Any] = report["multi_node"]
        assert multi["node"] == name and multi["launcher"] == "explicit"
        assert multi["nodes"] == [{"node": "n1", "ranks": [0, 1]}, {"node": "n2", "ranks": [2, 3]}]
        assert multi["inter_node"]["nodes"] == 2 and multi["inter_node"]["busbw_gbps"] > 0
        assert multi["suspect_nodes"] == ["n2"]
        wrong = [f for f in check(report, "allreduce")["findings"] if f["code"] == "allreduce.wrong-result"]
        assert wrong and all(f["message"].startswith("rank 3 on node n2 ") for f in wrong)
    assert not no_leftovers(mark)


def test_a_frozen_peer_ends_as_a_timeout_naming_it_within_the_limit(tmp_path: Path) -> None:
    env, mark = marked_env("allreduce:stop:rank1")  # rank 1 SIGSTOPs itself after joining
    report_path = tmp_path / "node.json"
    started = time.monotonic()
    proc = torchrun("--report", str(report_path), "--timeout", "20", env=env)
    assert proc.returncode != 0
    report = json.loads(report_path.read_text())  # rank 0's process: this node's report
    jsonschema.validate(report, SCHEMA)
    allreduce = check(report, "allreduce")
    assert allreduce["status"] == "timeout" and allreduce["duration_s"] <= 20, allreduce
    node = report["host"]["hostname"]
    assert report["multi_node"]["hung"] == [
        {"rank": 1, "node": node, "why": "stopped answering (no heartbeat for 2 s; frozen or gone)"}
    ]
    [finding] = allreduce["findings"]
    assert finding["code"] == "allreduce.peer-hung" and finding["message"].startswith(f"rank 1 on node {node} ")
    assert time.monotonic() - started < 200
    assert not no_leftovers(mark), "a process of the run is still there"
