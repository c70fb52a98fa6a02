"""gpuenv fleet verify --multi-node against the two provisioned SSH test hosts (distinct loopback
addresses): one gloo allreduce across both, every host's report with its multi_node object, a
corrupted element on one host that names that host, and a slow host that alone is not certified."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpuenv.resources import data_file
from tests.conftest import REPO, free_port, run_gpuenv
from tests.provision.fixtures import Provisioned
from tests.verify.spread_nodes import baseline

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
SCHEMA = json.loads(data_file("report.schema.json").read_text())


def fleet_multi_node(provisioned: Provisioned, work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    hosts = provisioned.hosts
    inventory = work / "hosts.ini"
    inventory.write_text(hosts.inventory(["h1", "h2"]))
    env = {
        **hosts.env(),
        "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "GLOO_SOCKET_IFNAME": "lo",  # passed through to every host's ranks, and recorded
    }
    return run_gpuenv(
        "fleet", "verify", "-i", str(inventory), "--multi-node", "--device", "cpu", "--check-timeout", "90",
        "--master-port", str(free_port()), "--reports-dir", str(work / "reports"), "--json", *args,
        env=env, timeout=600,
    )  # fmt: skip


@contextmanager
def fault_on(provisioned: Provisioned, host: int, fault: str) -> Iterator[None]:
    """The host's gpuenv runs with GPUENV_TEST_FAULT set (a wrapper script in its venv)."""
    gpuenv = provisioned.hosts.hosts[host].root / "opt/gpuenv/venv/bin/gpuenv"
    real = gpuenv.with_name("gpuenv.real")
    gpuenv.rename(real)
    gpuenv.write_text(f'#!/bin/sh\nGPUENV_TEST_FAULT={fault} exec {"/" / real.relative_to(real.parents[4])} "$@"\n')
    gpuenv.chmod(0o755)
    try:
        yield
    finally:
        real.replace(gpuenv)


def node_reports(work: Path) -> dict[str, dict[str, Any]]:
    found = {}
    for name in ("h1", "h2"):
        report = json.loads((work / "reports" / f"{name}.json").read_text())
        jsonschema.validate(report, SCHEMA)
        found[name] = report
    return found


def test_one_allreduce_across_two_hosts(provisioned: Provisioned, tmp_path: Path) -> None:
    result = fleet_multi_node(provisioned, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes = {h["host"]: h["outcome"] for h in json.loads(result.stdout)["hosts"]}
    assert outcomes == {"h1": "certified", "h2": "certified"}
    for name, report in node_reports(tmp_path).items():
        multi = report["multi_node"]
        assert multi["launcher"] == "explicit" and multi["node"] == name and multi["nnodes"] == 2
        assert multi["master_addr"] == provisioned.hosts.hosts[0].address
        assert multi["nodes"] == [{"node": "h1", "ranks": [0, 1]}, {"node": "h2", "ranks": [2, 3]}]
        assert multi["inter_node"]["busbw_gbps"] > 0 and multi["intra_node"][name]["busbw_gbps"] > 0
        assert multi["comm_env"]["GLOO_SOCKET_IFNAME"] == "lo"
        [allreduce] = report["checks"]
        assert allreduce["status"] == "pass" and allreduce["metrics"]["inter_node_busbw_gbps"] > 0


def test_a_corrupted_element_on_one_host_names_that_host(provisioned: Provisioned, tmp_path: Path) -> None:
    with fault_on(provisioned, 1, "allreduce:corrupt:rank3"):  # h2's second rank
        result = fleet_multi_node(provisioned, tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    outcomes = {h["host"]: h["outcome"] for h in json.loads(result.stdout)["hosts"]}
    assert outcomes == {"h1": "not certified", "h2": "not certified"}  # the collective failed on both
    for report in node_reports(tmp_path).values():
        assert report["multi_node"]["suspect_nodes"] == ["h2"]
        wrong = [f for f in report["checks"][0]["findings"] if f["code"] == "allreduce.wrong-result"]
        assert wrong and all(f["message"].startswith("rank 3 on node h2 ") for f in wrong)


def test_a_slow_host_is_named_and_only_it_is_not_certified(provisioned: Provisioned, tmp_path: Path) -> None:
    """Each host's exit code is its own: the host the localisation names fails, the other is
    certified with a note (the seam's slow node; a baseline no CPU meets sets the search off)."""
    expect = baseline(tmp_path, ranks=4)
    with fault_on(provisioned, 1, "allreduce:slow:rank2"):  # h2's first rank: every collective it joins
        result = fleet_multi_node(provisioned, tmp_path, "--baseline", str(expect))
    assert result.returncode == 1, result.stderr[-3000:]
    outcomes = {h["host"]: h["outcome"] for h in json.loads(result.stdout)["hosts"]}
    assert outcomes == {"h1": "certified", "h2": "not certified"}
    reports = node_reports(tmp_path)
    for report in reports.values():
        loc = report["multi_node"]["localisation"]
        assert loc["outcome"] == "slow node" and loc["nodes"] == ["h2"]
        assert [[g["nodes"] for g in r["groups"]] for r in loc["rounds"]] == [[["h1", "h2"]], [["h1"], ["h2"]]]
    codes = {name: {f["code"]: f for f in r["checks"][0]["findings"]} for name, r in reports.items()}
    assert codes["h1"]["allreduce.slow-node-elsewhere"]["severity"] == "info"
    slow = codes["h2"]["allreduce.slow-node"]
    assert slow["severity"] == "fail" and "its own ranks are slow among themselves too" in slow["message"]
