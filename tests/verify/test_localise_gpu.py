"""The localisation over NCCL, each GPU of this machine a single-rank "node" of its own (one verify
process per GPU, CUDA_VISIBLE_DEVICES and torchrun's environment, as tests/verify/spread_nodes.py
starts them): a slow node named and alone failing, a healthy run at deep naming nothing. Needs three
GPUs or more (two single-rank nodes cannot be told apart: their pair is the whole); skipped with the
reason elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.verify.spread_nodes import run_nodes
from tests.verify.test_faults import marked_env
from tests.verify.test_gpu import cuda_gpus

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(
        cuda_gpus() < 3,
        reason="needs three NVIDIA GPUs or more and a CUDA build of torch (each GPU stands in for a node)",
    ),
]


def test_a_slow_gpu_node_is_named_over_nccl_and_only_it_fails(tmp_path: Path) -> None:
    count = min(cuda_gpus(), 4)
    env, _ = marked_env(f"allreduce:slow:rank{count - 1}")
    nodes = run_nodes(tmp_path, count, "--level", "deep", env=env, device="cuda")
    assert [n.code for n in nodes] == [0] * (count - 1) + [1], [n.stderr[-2000:] for n in nodes]
    for node in nodes:
        assert node.allreduce["metrics"]["backend"] == "nccl"
        loc = node.localisation
        assert loc["outcome"] == "slow node" and loc["nodes"] == [f"n{count}"]
        assert len(loc["rounds"]) - 1 <= loc["budget"]["rounds"] and loc["seconds"] <= loc["budget"]["seconds"]
    assert "allreduce.slow-node" in nodes[-1].codes()
    assert all("allreduce.slow-node-elsewhere" in n.codes() for n in nodes[:-1])


def test_a_healthy_gpu_run_at_deep_names_nothing(tmp_path: Path) -> None:
    nodes = run_nodes(tmp_path, min(cuda_gpus(), 4), "--level", "deep", env={}, device="cuda")
    assert all(n.code == 0 for n in nodes), [n.stderr[-2000:] for n in nodes]
    assert nodes[0].localisation["outcome"] == "nothing slow"
