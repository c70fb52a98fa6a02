"""Fleet groups are keyed by (GPU model, CPU architecture): Arm nodes of a model are not x86 nodes' peers."""

from __future__ import annotations

from typing import Any

import jsonschema

from gpuenv.fleet import stats
from gpuenv.fleet.report_compare import compare
from gpuenv.fleet.report_model import HostReport, _group_dict
from gpuenv.fleet.report_reading import host_report
from gpuenv.resources import data_file
from tests.fleet import fleet_reports as fr
from tests.fleet.test_report import SCHEMA


def _hosts(nodes: list[fr.Node], cpu_arch: str | None) -> list[HostReport]:
    out = []
    for node in nodes:
        doc: dict[str, Any] = fr.report(node)
        if cpu_arch is not None:
            doc["host"]["cpu_arch"] = cpu_arch
        out.append(host_report(fr.typed(doc), f"{node.host}.json"))
    return out


def test_the_same_gpu_on_two_architectures_makes_two_groups() -> None:
    x86 = _hosts(fr.fleet(10, seed=7, prefix="x86"), "x86_64")
    arm_nodes = fr.fleet(10, seed=8, prefix="arm")
    for node in arm_nodes:  # a faster figure that is normal for its own architecture, not an outlier beside x86
        node.tflops = {i: v * 1.15 for i, v in node.tflops.items()}
    groups, outliers = compare(x86 + _hosts(arm_nodes, "aarch64"), stats.Rule(), stats.MIN_JUDGED)
    assert outliers == []
    assert {g.key.cpu_arch for g in groups} == {"x86_64", "aarch64"}
    assert any(g.key.label().startswith("8x NVIDIA H100 80GB HBM3 (aarch64) ") for g in groups)


def test_mixing_the_architectures_in_one_group_would_have_flagged_them() -> None:
    arm_nodes = fr.fleet(3, seed=8, prefix="arm")
    for node in arm_nodes:
        node.tflops = {i: v * 0.8 for i, v in node.tflops.items()}
    nodes = fr.fleet(10, seed=7, prefix="x86")
    _, outliers = compare(_hosts(nodes, None) + _hosts(arm_nodes, None), stats.Rule(), stats.MIN_JUDGED)
    assert outliers  # the control: one group, the slower hosts stand out
    _, apart = compare(_hosts(nodes, "x86_64") + _hosts(arm_nodes, "aarch64"), stats.Rule(), stats.MIN_JUDGED)
    assert not [o for o in apart if o.host.startswith("arm")]


def test_reports_without_the_architecture_group_as_before_and_the_json_says_it() -> None:
    groups, _ = compare(_hosts(fr.fleet(9, seed=3), None), stats.Rule(), stats.MIN_JUDGED)
    assert {g.key.cpu_arch for g in groups} == {None}
    assert all(g.key.label().startswith("8x NVIDIA H100 80GB HBM3 ") and "(" not in g.key.label() for g in groups)
    assert "cpu_arch" in data_file("report.schema.json").read_text()
    schema = SCHEMA["properties"]["groups"]["items"]["properties"]["cpu_arch"]
    for g in groups[:3]:
        jsonschema.validate(_group_dict(g)["cpu_arch"], schema)
