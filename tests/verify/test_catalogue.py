"""The findings catalogue, the report schemas (/1 and /2) and how the engine orders checks."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpuenv.errors import BadRequest
from gpuenv.resources import data_file
from gpuenv.verify import catalogue, registry
from gpuenv.verify.checks.nvml import events
from gpuenv.verify.checks.nvml.events import xid_findings
from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.checks.nvml.rules import gpu_findings
from gpuenv.verify.model import CheckResult, Finding, GpuRef, Report, decide, readable
from tests.conftest import run_gpuenv

SOURCES = Path(catalogue.__file__).parent
SCHEMA_V1 = json.loads(data_file("report.schema.v1.json").read_text())
SCHEMA_V2 = json.loads(data_file("report.schema.json").read_text())


def test_every_entry_is_complete() -> None:
    rules = catalogue.rules()
    assert len(rules) > 50
    for code, rule in rules.items():
        assert re.fullmatch(r"[a-z][a-z0-9]*\.[a-z0-9_-]+", code), code
        assert rule.severity in ("info", "warn", "fail") and rule.item
        if rule.severity != "info":
            assert rule.remediation and rule.action != "none", code
    assert {r.check for r in rules.values()} == {c.name for c in registry.CHECKS} | {"verify"}


def test_every_code_named_in_the_code_is_in_the_catalogue_and_every_entry_is_used() -> None:
    text = "\n".join(p.read_text() for p in SOURCES.rglob("*.py"))
    named = set(re.findall(r'finding\(\s*"([a-z][a-z0-9]*\.[a-z0-9_-]+)"', text))
    named |= {f"nvml.{rule}" for rule in re.findall(r'_finding\(\s*policy,\s*"([a-z0-9_]+)"', text)}
    named |= set(re.findall(r'"(nvml\.[a-z-]+)"', text))  # looked up by problem or XID class
    named |= {f"nvml.{rule}" for rule in load_policy()["ras_classes"].values() if rule}  # by AMD RAS class
    assert named - set(catalogue.rules()) == set()
    assert set(catalogue.rules()) - named == set()


def test_remediation_is_filled_from_fields_and_unknown_codes_raise() -> None:
    found = catalogue.finding("stack.nvcc-mismatch", "nvcc 12.1 vs 12.4", cuda="12.4")
    assert found.code == "stack.nvcc-mismatch" and found.remediation and "CUDA 12.4 toolkit" in found.remediation
    with pytest.raises(KeyError):
        catalogue.finding("amp.no-such-rule", "x")


def test_nvml_rule_names_stay_what_policy_files_override(tmp_path: Path) -> None:
    policy = tmp_path / "p.json"
    policy.write_text(
        json.dumps({"schema": "gpuenv.nvml-policy/1", "rules": {"ecc_uncorrected": {"severity": "warn"}}})
    )
    loaded = load_policy(policy)
    found = gpu_findings({"index": 3, "ecc_uncorrected": 2}, loaded)
    assert [(f.code, f.severity, f.action) for f in found] == [("nvml.ecc_uncorrected", "warn", "reset-gpu")]


def test_xid_findings_carry_codes_and_the_policys_action() -> None:
    found = xid_findings([(2, 79), (4, 13)], (), load_policy())
    assert [(f.code, f.severity, f.action) for f in found] == [
        ("nvml.xid", "fail", "drain"),
        ("nvml.xid-other", "warn", "monitor"),
    ]
    assert found[0].remediation == (
        "XID 79 (GPU has fallen off the bus): drain, then reboot the node; "
        "rerun verify before the node takes jobs again"
    )
    assert found[1].remediation == "restart the application that saw it; the GPU stays usable"


def report_v2() -> dict[str, Any]:
    finding = catalogue.finding("allreduce.wrong-result", "rank 1 got 1 wrong element", gpu=GpuRef(1, "GPU-1", None))
    checks = [
        CheckResult("allreduce", "fail", 1.5, "bad", {"world": 2}, [finding]),
        CheckResult("future-check", "pass"),
    ]
    verdict = decide(checks, strict=False, cpu_only=True, interrupted=None)
    report = Report(
        "quick",
        "cpu",
        True,
        "2026-11-30T16:00:00+00:00",
        "2026-11-30T16:01:00+00:00",
        "0.1",
        {"hostname": "n1", "gpus": []},
        {},
        checks,
        verdict,
        timings={"probe": 0.1, "total": 60.0},
    )
    return report.to_dict()


def report_v1() -> dict[str, Any]:
    data = report_v2()
    data["schema"] = "gpuenv.verify-report/1"
    del data["timings"]
    data["checks"] = [c for c in data["checks"] if c["name"] != "future-check"]
    for check in data["checks"]:
        for f in check["findings"]:
            del f["code"]
    return data


def test_both_schemas_ship_and_each_validates_its_reports() -> None:
    new, old = report_v2(), report_v1()
    jsonschema.validate(new, SCHEMA_V2)
    jsonschema.validate(old, SCHEMA_V1)
    assert readable(new) and readable(old) and not readable({"schema": "gpuenv.verify-report/3"})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(new, SCHEMA_V1)  # v1 knows neither codes nor new check names
    jsonschema.validate({**new, "multi_node": {"nodes": 4, "busbw_gbps": 400.0}}, SCHEMA_V2)
    bad = json.loads(json.dumps(new))
    bad["checks"][0]["findings"][0]["code"] = "no dot"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA_V2)


@pytest.mark.cpu  # a real verify run (torch)
def test_a_real_run_gives_every_finding_a_catalogued_code() -> None:
    proc = run_gpuenv(
        "verify", "--device", "cpu", "--check", "stack", "--check", "profiler", "--check", "nvml", "--json", timeout=300
    )
    report = json.loads(proc.stdout)
    jsonschema.validate(report, SCHEMA_V2)
    codes = [f["code"] for c in report["checks"] for f in c["findings"]]
    assert codes and set(codes) <= set(catalogue.rules())
    assert report["schema"] == "gpuenv.verify-report/2"
    assert {"probe", "total", "check:stack", "check:profiler"} <= set(report["timings"])


def spec(name: str, **kw: Any) -> registry.CheckSpec:
    return registry.CheckSpec(name, "quick", (1, 1, 1), False, name, **kw)


def test_the_engine_orders_checks_from_what_they_need_and_provide() -> None:
    producer = spec("producer", provides=("thing",))
    consumer = spec("consumer", needs=("host", "thing"))
    assert [s.name for s in registry.order([consumer, producer])] == ["producer", "consumer"]
    # a need nothing selected provides never pulls a check in: --check never adds checks
    assert [s.name for s in registry.order([consumer])] == ["consumer"]
    assert [s.name for s in registry.select("quick", ("stack",))] == ["stack"]
    with pytest.raises(ValueError, match="cycle"):
        registry.order([spec("a", needs=("b",), provides=("a",)), spec("b", needs=("a",), provides=("b",))])


def test_gpu_exclusive_work_runs_before_the_worker_holds_contexts() -> None:
    ranks = spec("ranks", exclusive_gpus=True)
    context = spec("context", context_in_worker=True)
    plain = spec("plain")
    assert [s.name for s in registry.order([context, plain, ranks])] == ["plain", "ranks", "context"]
    names = [c.name for c in registry.select("quick", ())]
    assert names.index("allreduce") < names.index("amp") and names[0] == "nvml"


def test_findings_round_trip_with_code() -> None:
    found = catalogue.finding("memory.bad-bytes", "3 bytes", gpu=GpuRef(0))
    assert Finding.from_dict(found.to_dict()) == found and found.to_dict()["code"] == "memory.bad-bytes"


def test_one_xid_list_the_catalogue_judged_by_bucket(tmp_path: Path) -> None:
    policy = load_policy()
    xids = events.xid_catalogue()["xids"]
    buckets = {e["bucket"] for e in xids.values() if e["bucket"]} | set(policy["recovery_action_buckets"].values())
    assert buckets <= set(policy["xid_buckets"]) | {"XID_154"}  # every bucket the data names is judged
    fatal = {
        int(x) for x, e in xids.items() if e["bucket"] and policy["xid_buckets"][e["bucket"]]["severity"] == "fail"
    }
    # reset/reboot in NVIDIA's catalogue: 95, 140, the GSP, link-training and init ones among them
    assert {46, 48, 62, 64, 74, 79, 95, 109, 119, 120, 136, 140, 143, 158} <= fatal
    assert not {13, 31, 43, 63, 94, 121} & fatal  # restart the application, or ignore (121: corrected C2C errors)
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps({"schema": "gpuenv.nvml-policy/1", "xids": {"13": "RESET_GPU"}}))
    [found] = xid_findings([(0, 13)], (), load_policy(moved))
    assert (found.code, found.severity, found.action) == ("nvml.xid", "fail", "drain") and "(policy)" in found.message
    [unknown] = xid_findings([(0, 9999)], (), policy)
    assert unknown.code == "nvml.xid-other" and "not in NVIDIA's XID catalogue" in unknown.message


def test_the_old_two_xid_lists_are_refused_with_a_hint(tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema": "gpuenv.nvml-policy/1", "fatal_xids": [13], "xid_actions": {"13": "reboot"}}))
    with pytest.raises(BadRequest, match="fatal_xids"):
        load_policy(old)
