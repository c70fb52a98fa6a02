"""A real slow link, not the test seam's model of one: four single-rank "nodes", each a verify process
in a network namespace of its own, joined by veth pairs on a bridge; the path between n1 and n3 is
held to a low rate by an HTB class on each end's egress, filtered by the other's address (the
kernel has HTB and u32 but not netem, so the link is slow by rate, not by delay). The localisation
names the link and certifies both ends."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.verify.spread_nodes import baseline, run_nodes
from tests.verify.test_localise_cpu import checked, groups

pytestmark = [pytest.mark.slow, pytest.mark.cpu]
NODES = 4
SLOW_RATE = "50mbit"  # 0.006 GB/s: a healthy pair moves the localisation's 4 MiB at 0.04-0.3 GB/s here
DEVICE = "gx0"  # each namespace's end of its veth pair


def run(*args: str, ns: str | None = None) -> None:
    """A command here, or inside namespace `ns`."""
    prefix = ["ip", "netns", "exec", ns] if ns else []
    subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=30)


def address(node: int) -> str:
    return f"10.77.0.{node + 1}"


@pytest.fixture
def namespaces() -> Iterator[list[str]]:
    """NODES namespaces on one bridge, node i at 10.77.0.(i+1) on its DEVICE; removed after."""
    require(os.geteuid() == 0 and bool(shutil.which("ip") and shutil.which("tc")), "needs root and iproute2")
    token = uuid.uuid4().hex[:6]
    bridge, names = f"gbr{token}", [f"gpuenv-{token}-n{n + 1}" for n in range(NODES)]
    try:
        run("ip", "link", "add", bridge, "type", "bridge")
        run("ip", "link", "set", bridge, "up")
        for n, ns in enumerate(names):
            run("ip", "netns", "add", ns)
            outside, inside = f"gv{token}{n}", f"gi{token}{n}"
            run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            run("ip", "link", "set", inside, "netns", ns)
            run("ip", "link", "set", outside, "master", bridge, "up")
            run("ip", "link", "set", inside, "name", DEVICE, ns=ns)
            run("ip", "addr", "add", f"{address(n)}/24", "dev", DEVICE, ns=ns)
            run("ip", "link", "set", DEVICE, "up", ns=ns)
            run("ip", "link", "set", "lo", "up", ns=ns)
        yield names
    finally:
        for ns in names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=30)


def slow_path(ns: str, to: str) -> None:
    """Everything `ns` sends to `to` through an HTB class at SLOW_RATE; the rest unshaped."""
    run("tc", "qdisc", "add", "dev", DEVICE, "root", "handle", "1:", "htb", "default", "10", ns=ns)
    run("tc", "class", "add", "dev", DEVICE, "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit", ns=ns)
    run("tc", "class", "add", "dev", DEVICE, "parent", "1:", "classid", "1:20", "htb", "rate", SLOW_RATE, ns=ns)
    match = ["u32", "match", "ip", "dst", f"{to}/32", "flowid", "1:20"]
    run("tc", "filter", "add", "dev", DEVICE, "parent", "1:", "protocol", "ip", *match, ns=ns)


def test_a_rate_limited_link_between_two_namespaces_is_named_and_both_ends_certified(
    namespaces: list[str], tmp_path: Path
) -> None:
    slow_path(namespaces[0], address(2))  # n1 -> n3: a pair of quick's second round (n1+n3, n2+n4)
    slow_path(namespaces[2], address(0))  # n3 -> n1
    nodes = run_nodes(
        tmp_path,
        NODES,
        "--timeout",
        "300",  # the whole 64 MiB collective crosses the slow link too: it waits half the check's limit
        "--baseline",
        str(baseline(tmp_path, ranks=NODES)),
        env={"GLOO_SOCKET_IFNAME": DEVICE},
        master_addr=address(0),
        prefix=lambda rank: ["ip", "netns", "exec", namespaces[rank]],
    )
    assert [n.code for n in nodes] == [0] * NODES, [n.stderr[-2000:] for n in nodes]
    checked(nodes)
    loc = nodes[0].localisation
    assert loc["outcome"] == "slow link" and loc["nodes"] == ["n1", "n3"], groups(nodes[0])
    for node in nodes:
        assert node.codes()["allreduce.slow-link"] == "info" and node.report["verdict"]["certified"]
