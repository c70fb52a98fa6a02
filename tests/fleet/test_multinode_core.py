"""fleet verify --multi-node, the pure half: each host's node rank, the rendezvous host, the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuenv.ansible.hosts import Hosts
from gpuenv.ansible.inventory import Host, Inventory
from gpuenv.errors import BadRequest
from gpuenv.fleet import run

INVENTORY = Inventory((Host("h1", {"ansible_host": "127.0.0.21"}), Host("h2", {}), Host("h3", {})))


def test_node_ranks_follow_the_inventory_and_the_first_host_holds_the_rendezvous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = run.FleetVerifyRequest(multi_node=True, master_port=29611)
    variables = run.multi_node_variables(request, INVENTORY, ("h1", "h3"))
    assert variables == {"nnodes": 2, "master_addr": "127.0.0.21", "master_port": 29611, "ranks": {"h1": 0, "h3": 1}}
    assert run.verify_arguments(run.FleetVerifyRequest(multi_node=True, checks=()))[-2:] == ["--check", "allreduce"]
    assert run.multi_node_variables(run.FleetVerifyRequest(), INVENTORY, ("h1",)) is None
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    monkeypatch.setenv("MASTER_ADDR", "elsewhere")  # the play sets the rendezvous itself
    text = run.render_variables(request, reports_dir=Path("/r"), files={}, multi_node=variables)
    data = json.loads(text.split("\n", 1)[1])
    assert data["fleet_multi_node"] == variables and data["fleet_env"] == {"NCCL_SOCKET_IFNAME": "ib0"}


@pytest.mark.parametrize(
    ("request_", "hosts", "message"),
    [
        (run.FleetVerifyRequest(multi_node=True, checks=("nvml",)), ("h1", "h2"), "collective check alone"),
        (run.FleetVerifyRequest(multi_node=True), ("h1",), "two hosts or more"),
        (run.FleetVerifyRequest(multi_node=True, hosts=Hosts(forks=2)), ("h1", "h2", "h3"), "--forks is 2"),
    ],
)
def test_what_cannot_run_across_the_hosts_is_refused(
    request_: run.FleetVerifyRequest, hosts: tuple[str, ...], message: str
) -> None:
    with pytest.raises(BadRequest, match=message):
        run.check_multi_node(request_, hosts)
    run.check_multi_node(run.FleetVerifyRequest(), hosts)  # without --multi-node: nothing to check
