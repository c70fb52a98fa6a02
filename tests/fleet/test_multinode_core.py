"""fleet verify --multi-node, the pure half: each host's node rank, the rendezvous host, the refusals."""

from __future__ import annotations

import json

import pytest

from gpuenv.ansible.hosts import Hosts
from gpuenv.ansible.inventory import Host, Inventory
from gpuenv.errors import BadRequest
from gpuenv.fleet import request, run

INVENTORY = Inventory((Host("h1", {"ansible_host": "127.0.0.21"}), Host("h2", {}), Host("h3", {})))


def test_node_ranks_follow_the_inventory_and_the_first_host_holds_the_rendezvous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = request.FleetVerifyRequest(multi_node=True, master_port=29611)
    variables = run.multi_node_variables(asked, INVENTORY, ("h1", "h3"))
    assert variables == {"nnodes": 2, "master_addr": "127.0.0.21", "master_port": 29611, "ranks": {"h1": 0, "h3": 1}}
    assert request.verify_arguments(request.FleetVerifyRequest(multi_node=True))[-2:] == ["--check", "allreduce"]
    assert run.multi_node_variables(request.FleetVerifyRequest(), INVENTORY, ("h1",)) is None
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    monkeypatch.setenv("MASTER_ADDR", "elsewhere")  # the play sets the rendezvous itself
    data = json.loads(run.render_variables(asked, inputs=None, multi_node=variables).split("\n", 1)[1])
    assert data["fleet_env"] == {"NCCL_SOCKET_IFNAME": "ib0"}
    placement = ["--nnodes", "2", "--master-addr", "127.0.0.21", "--master-port", "29611", "--node-rank"]
    for host, rank in (("h1", "0"), ("h3", "1")):
        argv = data["fleet_argv_by_host"][host]
        assert argv[: len(data["fleet_argv"]) - 2] == data["fleet_argv"][:-2]  # the common command first
        assert argv[-12:] == [*placement, rank, "--node-name", host, "--report", "-"]


@pytest.mark.parametrize(
    ("request_", "hosts", "message"),
    [
        (request.FleetVerifyRequest(multi_node=True, checks=("nvml",)), ("h1", "h2"), "collective check alone"),
        (request.FleetVerifyRequest(multi_node=True, passive=True), ("h1", "h2"), "collective check alone"),
        (request.FleetVerifyRequest(multi_node=True), ("h1",), "two hosts or more"),
        (request.FleetVerifyRequest(multi_node=True, slurm=True), ("h1",), "two hosts or more"),
        (request.FleetVerifyRequest(multi_node=True, hosts=Hosts(forks=2)), ("h1", "h2", "h3"), "--forks is 2"),
    ],
)
def test_what_cannot_run_across_the_hosts_is_refused(
    request_: request.FleetVerifyRequest, hosts: tuple[str, ...], message: str
) -> None:
    with pytest.raises(BadRequest, match=message):
        request.check_multi_node(request_, hosts)
    request.check_multi_node(request.FleetVerifyRequest(), hosts)  # without --multi-node: nothing to check
    slurm = request.FleetVerifyRequest(multi_node=True, slurm=True, hosts=Hosts(forks=2))
    request.check_multi_node(slurm, ("h1", "h2", "h3"))  # srun starts every task at once: no forks
