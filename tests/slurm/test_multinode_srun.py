"""verify --check allreduce as an srun step on the test Slurm (one node, two tasks): the launcher is
recognised from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID, the rendezvous host from SLURM_STEP_NODELIST,
and a corrupted element names the rank at fault and its node."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest

from gpuenv.resources import data_file
from tests.slurm.conftest import NODE, Slurm, leftover_processes, new_mark

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.cpu]
SCHEMA = json.loads(data_file("report.schema.json").read_text())


def test_srun_two_tasks_name_the_faulty_rank_on_its_node(idle: Slurm) -> None:
    mark = new_mark()
    report, summary = idle.root / "srun-node.json", idle.root / "srun-job.json"
    env = {**idle.env, "GPUENV_TEST_FAULT": "allreduce:corrupt:rank1", "GPUENV_TEST_MARK": mark}
    env["NCCL_DEBUG"] = "WARN"  # recorded in the report as the ranks ran with it
    proc = subprocess.run(
        ["srun", "-n", "2", "--time", "5", sys.executable, "-m", "gpuenv", "verify", "--check", "allreduce",
         "--device", "cpu", "--timeout", "120", "--report", str(report), "--job-summary", str(summary)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    data = json.loads(report.read_text())  # written once, by the node's local rank 0
    jsonschema.validate(data, SCHEMA)
    multi = data["multi_node"]
    assert (multi["launcher"], multi["world"], multi["nnodes"], multi["node"]) == ("srun", 2, 1, NODE)
    assert multi["master_addr"] == NODE and multi["comm_env"]["NCCL_DEBUG"] == "WARN"
    assert multi["suspect_nodes"] == [NODE]
    [allreduce] = data["checks"]
    wrong = [f for f in allreduce["findings"] if f["code"] == "allreduce.wrong-result"]
    assert wrong and all(f["message"].startswith(f"rank 1 on node {NODE} ") for f in wrong)
    job = json.loads(summary.read_text())
    assert job["launcher"] == "srun" and job["job"].endswith(".0") and not job["verdict"]["certified"]
    assert not leftover_processes(mark)
