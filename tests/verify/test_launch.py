"""Where a verify stands in a run across nodes (pure): srun, torchrun, explicit flags, node lists."""

from __future__ import annotations

import pytest

from gpuenv.errors import BadRequest
from gpuenv.verify.launch import Explicit, comm_environment, detect, expand_nodelist, job_port
from gpuenv.verify.service import VerifyRequest, placement_of

SRUN = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "3",
    "SLURM_PROCID": "9",
    "SLURM_NTASKS": "16",
    "SLURM_STEP_NUM_TASKS": "16",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURMD_NODENAME": "gpu002",
    "SLURM_STEP_NODELIST": "gpu[001-002]",
}
TORCHRUN = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "GROUP_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29400",
    "TORCHELASTIC_RUN_ID": "job7",
    "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
}


def test_real_slurm_node_lists_expand() -> None:
    assert expand_nodelist("gpu[001-004,010]") == ["gpu001", "gpu002", "gpu003", "gpu004", "gpu010"]
    assert expand_nodelist("a[1-2]-b[3-4]") == ["a1-b3", "a1-b4", "a2-b3", "a2-b4"]
    assert expand_nodelist("vm") == ["vm"]
    with pytest.raises(BadRequest, match="node list"):
        expand_nodelist("gpu[3-1")


def test_srun_gives_the_rank_and_the_first_node_of_the_step_hosts_the_rendezvous() -> None:
    placement = detect(SRUN, Explicit())
    assert placement is not None
    assert (placement.launcher, placement.rank, placement.world, placement.local_rank) == ("srun", 9, 16, 1)
    assert (placement.node, placement.node_rank, placement.nnodes) == ("gpu002", 1, 2)
    assert placement.master_addr == "gpu001"
    assert placement.master_port == job_port("4242", "3") == 10000 + (4242 * 97 + 3) % 20000
    assert not placement.hosts_store and not placement.leads_job and not placement.leads_node
    assert job_port("4242", "4") != job_port("4242", "3")  # concurrent steps of a job do not collide
    rank0 = detect({**SRUN, "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "MASTER_PORT": "31000"}, Explicit())
    assert rank0 is not None and rank0.hosts_store and rank0.leads_job and rank0.master_port == 31000


def test_torchrun_wins_inside_srun_and_its_agent_may_host_the_store() -> None:
    placement = detect({**SRUN, **TORCHRUN}, Explicit())
    assert placement is not None and placement.launcher == "torchrun"
    assert (placement.rank, placement.world, placement.local_rank, placement.node_rank, placement.nnodes) == (
        5,
        8,
        1,
        1,
        2,
    )
    assert placement.agent_store and not placement.hosts_store
    assert placement.to_dict()["master"] == "10.0.0.1:29400"


def test_explicit_flags_win_and_must_come_together() -> None:
    explicit = Explicit(nnodes=2, node_rank=1, master_addr="127.0.0.11", master_port=29611, node_name="h2")
    placement = detect(TORCHRUN, explicit)
    assert placement is not None and placement.launcher == "explicit"
    assert (placement.node, placement.node_rank, placement.rank, placement.world) == ("h2", 1, None, None)
    assert placement.leads_node and not placement.hosts_store
    with pytest.raises(BadRequest, match="--node-rank, --master-addr"):
        detect({}, Explicit(nnodes=2))
    with pytest.raises(BadRequest, match=r"outside 0\.\.1"):
        detect({}, Explicit(nnodes=2, node_rank=2, master_addr="h1"))


def test_no_launcher_one_rank_or_none_is_a_run_on_this_node() -> None:
    assert detect({}, Explicit()) is None
    one_task = {"SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
    assert detect({**SRUN, **one_task}, Explicit()) is None
    assert detect(SRUN, Explicit(), choice="none") is None
    with pytest.raises(BadRequest, match="not inside an srun step"):
        detect(TORCHRUN | {"SLURM_PROCID": ""}, Explicit(), choice="srun")
    with pytest.raises(BadRequest, match="MASTER_PORT"):
        detect({**TORCHRUN, "MASTER_PORT": "99999"}, Explicit())


def test_only_the_collective_check_goes_across_nodes() -> None:
    """An srun of one task per node running the node checks stays a run on each node, as before."""
    assert placement_of(VerifyRequest(), env=SRUN) is None
    assert placement_of(VerifyRequest(checks=("allreduce", "nvml")), env=SRUN) is None
    placement = placement_of(VerifyRequest(checks=("allreduce",)), env=SRUN)
    assert placement is not None and placement.launcher == "srun"
    with pytest.raises(BadRequest, match="only the collective check"):
        placement_of(VerifyRequest(explicit=Explicit(nnodes=2, node_rank=0, master_addr="h1")), env={})


def test_the_communication_settings_are_recorded() -> None:
    env = {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_0", "NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "lo"}
    assert comm_environment({**env, "HOME": "/root", "SECRET_TOKEN": "x"}) == env
