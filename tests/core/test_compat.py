"""Invariants of the shipped knowledge base, its schema check, and the driver rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuenv.compat import SchemaError, V, driver_runs_cuda, load_kb, parse_kb, recommended_branch
from gpuenv.errors import BadRequest
from gpuenv.resources import data_file

KB = load_kb()
RAW = json.loads(data_file("compat.json").read_text())


def test_every_torch_build_has_an_image_and_a_driver_floor() -> None:
    for torch in KB.torch:
        for build in torch.builds:
            cuda = KB.cuda_by_build[build]
            assert cuda.images, f"{torch.version}+{build} has no base image"
            assert V(cuda.minor_compat_floor) <= V(cuda.bundled_driver)
            assert any(b.major >= int(cuda.bundled_driver.split(".")[0]) for b in KB.driver_branches)


@pytest.mark.parametrize("table,key", [("torch", "version"), ("cuda", "version"), ("architectures", "sm")])
def test_versions_are_sorted_and_unique(table: str, key: str) -> None:
    versions = [V(row[key]) for row in RAW[table]]
    assert versions == sorted(versions)
    assert len(set(versions)) == len(versions)


def test_driver_branches_sorted_unique() -> None:
    majors = [b.major for b in KB.driver_branches]
    assert majors == sorted(set(majors))


def test_every_row_has_provenance() -> None:
    for table in ("torch", "cuda", "architectures", "gpus", "driver_branches", "os"):
        for row in RAW[table]:
            assert row["source"] and row["checked"]
            if row["source"] in RAW["sources"]:
                continue
            pytest.fail(f"{table} row names unknown source {row['source']}")


def test_facts_from_the_reference() -> None:
    assert KB.find_cuda("cu117").toolkit == "11.7.1"
    assert KB.find_cuda("11.7").cudnn == "8.5.0.96"
    assert KB.find_cuda("12.3").cudnn_tag == "cudnn9"
    assert KB.find_cuda("12.4").cudnn_tag == "cudnn"
    assert KB.find_cuda("12.2").cudnn_tag == "cudnn8"
    assert "ubuntu20.04" not in KB.find_cuda("13.0").images
    assert "11.7.0" in KB.find_cuda("11.7").deleted_tags
    t113 = next(t for t in KB.torch if t.version == "1.13.1")
    assert t113.builds == ("cu116", "cu117") and "3.10" in t113.python
    assert next(t for t in KB.torch if t.version == "2.13.0").torchaudio is None
    assert "torchvision" in next(t for t in KB.torch if t.version == "2.13.0").provenance.unconfirmed


def test_every_torch_release_supports_python_310() -> None:
    assert all("3.10" in t.python for t in KB.torch)


def test_driver_rule_native_minor_and_no() -> None:
    assert driver_runs_cuda(KB, "580.65.06", "cu130").mode == "native"
    assert driver_runs_cuda(KB, "535.104.05", "cu126").mode == "minor-version"
    assert not driver_runs_cuda(KB, "535.104.05", "cu130").ok
    assert not driver_runs_cuda(KB, "470.82.01", "12.1").ok
    assert driver_runs_cuda(KB, "470.82.01", "11.8").mode == "minor-version"
    assert driver_runs_cuda(KB, "580", "13.0").mode == "native"  # a bare branch compares by branch


def test_recommended_branch_is_lts_r580_unless_too_old() -> None:
    assert recommended_branch(KB, KB.find_cuda("cu117")).branch == "R580"
    assert recommended_branch(KB, KB.find_cuda("cu132")).branch == "R595"


def test_schema_rejects_broken_rows() -> None:
    broken = json.loads(json.dumps(RAW))
    del broken["cuda"][0]["bundled_driver"]
    with pytest.raises(SchemaError, match="lacks 'bundled_driver'"):
        parse_kb(broken)
    broken = json.loads(json.dumps(RAW))
    broken["torch"][0]["builds"].append("cu999")
    with pytest.raises(SchemaError, match="cu999"):
        parse_kb(broken)


def test_user_data_file_errors_are_bad_requests(tmp_path: Path) -> None:
    bad = tmp_path / "kb.json"
    bad.write_text("{not json")
    with pytest.raises(BadRequest, match="not usable"):
        load_kb(bad)


def test_user_data_file_overrides(tmp_path: Path) -> None:
    mine = json.loads(json.dumps(RAW))
    mine["wheel_index"] = "https://mirror.example.com/whl/{build}"
    path = tmp_path / "kb.json"
    path.write_text(json.dumps(mine))
    assert load_kb(path).index_url("cu117") == "https://mirror.example.com/whl/cu117"
