"""Invariants of the shipped knowledge base, its schema check, the driver and GPU-code rules, and the
facts pinned against their sources (the package index part of the snapshot in tests/data/kb-snapshot/)."""

from __future__ import annotations

import json
import re
from datetime import date, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from gpuenv import compat, kb
from gpuenv.compat import model as compat_model
from gpuenv.errors import BadRequest
from gpuenv.kb import (
    STALE_AFTER_DAYS,
    ArchList,
    SchemaError,
    V,
    cubin_runs_on,
    driver_runs_cuda,
    gpu_code_for,
    kb_age_days,
    load_kb,
    parse_kb,
    ptx_runs_on,
    recommended_branch,
    staleness_warning,
)
from gpuenv.kb.derive import requires_dist
from gpuenv.platforms.cuda.host import gpu_by_pci_id
from gpuenv.resources import data_file

KB = load_kb()
RAW = json.loads(data_file("compat.json").read_text())
SNAPSHOT = Path(__file__).parent.parent / "data" / "kb-snapshot"
PYPI = {
    name: json.loads((SNAPSHOT / "pypi/pypi" / name / "json").read_text())
    for name in ("torch", "torchvision", "torchaudio")
}


def _recorded_metadata() -> dict[str, dict[str, dict[str, list[str]]]]:
    """package -> version -> {"requires_dist": [...]}, from the METADATA recorded per wheel."""
    out: dict[str, dict[str, dict[str, list[str]]]] = {}
    for file in SNAPSHOT.glob("pypi-files/**/*.whl.METADATA"):
        package, version = file.name.split("-")[:2]
        out.setdefault(package, {})[version] = {"requires_dist": requires_dist(file.read_text())}
    return out


METADATA = _recorded_metadata()


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
    """Each row's source is a list of known keys or concrete addresses (URLs)."""
    for table in ("torch", "cuda", "architectures", "gpus", "pci_devices", "driver_branches", "os"):
        for row in RAW[table]:
            assert row["source"] and re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["checked"])
            for part in row["source"].split("; "):
                if part not in RAW["sources"] and not part.startswith("https://"):
                    pytest.fail(f"{table} row names unknown source {part!r}")


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


def _release(version: str):  # type: ignore[no-untyped-def]
    return next(t for t in KB.torch if t.version == version)


# The corrected facts, each with where it comes from.
CUDA_FACTS = [
    # (cuda, toolkit, bundled driver, source: the runfile name of that toolkit)
    ("11.6", "11.6.2", "510.47.03", "cuda_11.6.2_510.47.03_linux.run"),
    ("12.0", "12.0.1", "525.85.12", "cuda_12.0.1_525.85.12_linux.run"),
    ("12.2", "12.2.2", "535.104.05", "cuda_12.2.2_535.104.05_linux.run"),
    ("12.3", "12.3.2", "545.23.08", "cuda_12.3.2_545.23.08_linux.run"),
    ("12.4", "12.4.1", "550.54.15", "cuda_12.4.1_550.54.15_linux.run"),
    ("12.5", "12.5.1", "555.42.06", "cuda_12.5.1_555.42.06_linux.run"),
    ("12.6", "12.6.3", "560.35.05", "cuda_12.6.3_560.35.05_linux.run"),
    ("12.8", "12.8.1", "570.124.06", "cuda_12.8.1_570.124.06_linux.run"),
    ("12.9", "12.9.1", "575.57.08", "cuda_12.9.1_575.57.08_linux.run"),
    ("13.0", "13.0.3", "580.126.20", "cuda_13.0.3_580.126.20_linux.run"),
    ("13.1", "13.1.2", "590.48.01", "cuda_13.1.2_590.48.01_linux.run"),
    ("13.2", "13.2.2", "595.71.05", "cuda_13.2.2_595.71.05_linux.run"),
]


@pytest.mark.parametrize("cuda,toolkit,driver,runfile", CUDA_FACTS)
def test_bundled_driver_is_the_newest_patch_runfiles(cuda: str, toolkit: str, driver: str, runfile: str) -> None:
    row = KB.find_cuda(cuda)
    assert (row.toolkit, row.bundled_driver) == (toolkit, driver)
    assert runfile in row.provenance.source


GPU_CODE_FACTS = [
    # (release, build, arch list, source)
    ("2.0.0", "cu118", "3.7;5.0;6.0;7.0;7.5;8.0;8.6;9.0", "arch-builder-2.0"),  # sm_90 in 2.0.0's cu118
    ("2.7.1", "cu128", "7.5;8.0;8.6;9.0;10.0;12.0+PTX", "arch-pytorch-tags"),  # no sm_70: V100 fails
    ("2.8.0", "cu128", "7.0;7.5;8.0;8.6;9.0;10.0;12.0", "arch-pytorch-2.8"),  # sm_70 back (#157517)
    ("2.14.1", "cu126", "5.0;6.0;7.0;7.5;8.0;8.6;9.0", "arch-pytorch-2.12"),  # the last with Maxwell/Pascal
    ("2.14.1", "cu130", "7.5;8.0;8.6;9.0;10.0;12.0+PTX", "arch-pytorch-2.12"),
]


@pytest.mark.parametrize("release,build,arch,source", GPU_CODE_FACTS)
def test_gpu_code_per_release_and_build(release: str, build: str, arch: str, source: str) -> None:
    row = _release(release)
    assert str(row.arch[build]) == arch
    assert source in row.provenance.source


def test_smaller_corrections() -> None:
    assert KB.find_cuda("11.6").cudnn == "8.4.0.27"
    assert "cudnn" not in KB.find_cuda("11.6").provenance.unconfirmed
    assert "11.6.2" not in KB.find_cuda("11.6").deleted_tags  # its cudnn8-devel tags were still listed in 2025
    assert _release("2.5.1").python_experimental == ("3.13",)
    assert KB.arch("10.3") is not None and KB.find_gpu("GB300").sm == "10.3"
    assert {KB.find_gpu(n).sm for n in ("P100", "P40", "M40")} == {"6.0", "6.1", "5.2"}


def test_driver_branches_lts_flags_and_new_branches() -> None:
    by_name = {b.branch: b for b in KB.driver_branches}
    assert {b.branch for b in KB.driver_branches if b.lts} == {"R470", "R535", "R580"}
    assert by_name["R525"].kind == "production" and not by_name["R525"].lts
    assert {"R565", "R610", "R620"} <= set(by_name)


def test_torchaudio_pairings_after_maintenance() -> None:
    for version in ("2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1"):
        assert _release(version).torchaudio == "2.11.1"
    assert "torch>=2.11" in METADATA["torchaudio"]["2.11.1"]["requires_dist"]


def test_default_builds_match_the_plain_wheels_cuda_pin() -> None:
    """The plain PyPI wheel's build is the CUDA runtime its METADATA pins."""
    for t in KB.torch:
        pins = " ".join(METADATA["torch"][t.version]["requires_dist"])
        match = re.search(r"(?:nvidia-cuda-runtime-cu1\d\s*\(?==|cuda-toolkit\[[^\]]*\]==)(\d+)\.(\d+)", pins)
        assert match, t.version
        assert t.default_build == f"cu{match.group(1)}{match.group(2)}", t.version


# --- the knowledge base against the package index snapshot -------------------------------------------


def _linux_cp_tags(package: str, version: str) -> set[str]:
    tags = set()
    for f in PYPI[package]["releases"][version]:
        m = re.match(rf"{package}-[^-]+-cp(\d)(\d+)-cp\d+m?-manylinux.*x86_64\.whl$", f["filename"])
        if m:
            tags.add(f"{m.group(1)}.{m.group(2)}")
    return tags


def test_every_torch_release_on_the_index_is_known_with_its_python_tags() -> None:
    on_index = {v for v in PYPI["torch"]["releases"] if Version("1.13.0") <= Version(v) <= Version("2.15.0")}
    assert {t.version for t in KB.torch} == on_index
    for t in KB.torch:
        assert set(t.python) == _linux_cp_tags("torch", t.version), t.version
        released = min(f["upload_time_iso_8601"] for f in PYPI["torch"]["releases"][t.version])[:10]
        assert t.released == released


def test_companions_exist_and_are_pinned_or_admitted() -> None:
    """torchvision/torchaudio exist, are not yanked, and their Requires-Dist pins (or admits) the torch."""
    for t in KB.torch:
        for package in ("torchvision", "torchaudio"):
            version = getattr(t, package)
            if version is None:
                continue
            files = PYPI[package]["releases"][version]
            assert files and not any(f["yanked"] for f in files), (t.version, package)
            torch_reqs = [r for r in METADATA[package][version]["requires_dist"] if r.startswith("torch")]
            for req in torch_reqs:
                spec = req.removeprefix("torch").replace("(", "").replace(")", "").replace(" ", "")
                assert Version(t.version) in SpecifierSet(spec), (t.version, package, req)


def test_torchvision_follows_the_release_line() -> None:
    """torchvision 0.(N+15) pairs with torch 2.N (0.14 with 1.13), with the same patch except 2.0.x."""
    for t in KB.torch:
        if t.torchvision is None:
            assert not [v for v in PYPI["torchvision"]["releases"] if v.startswith(_line_torchvision(t.version))]
            continue
        assert t.torchvision.startswith(_line_torchvision(t.version)), t.version


def _line_torchvision(torch: str) -> str:
    major, minor = (int(x) for x in torch.split(".")[:2])
    return "0.14." if major == 1 else f"0.{minor + 15}."


def test_trio_python_excludes_experimental() -> None:
    """Where torchvision has no wheel for a torch's Python, that Python is marked experimental."""
    for t in KB.torch:
        if t.torchvision is None:
            continue
        missing = set(t.python) - _linux_cp_tags("torchvision", t.torchvision)
        assert set(t.python_experimental) == missing, t.version


# --- GPU code, PCI ids, staleness ------------------------------------------------------------------


def test_cubin_and_ptx_rules() -> None:
    assert cubin_runs_on("8.6", "8.9") and cubin_runs_on("10.0", "10.3") and cubin_runs_on("6.0", "6.1")
    assert not cubin_runs_on("8.0", "9.0") and not cubin_runs_on("8.9", "8.6") and not cubin_runs_on("9.0", "10.0")
    assert ptx_runs_on("9.0", "12.0") and not ptx_runs_on("12.0", "9.0")
    code = ArchList.parse("7.5;8.0;8.6;9.0;10.0;12.0+PTX")
    assert gpu_code_for(code, "8.9") == "sass" and gpu_code_for(code, "7.0") is None
    assert gpu_code_for(ArchList.parse("7.5;9.0+PTX"), "10.0") == "ptx"
    assert str(code) == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"


capabilities = st.builds(lambda major, minor: f"{major}.{minor}", st.integers(3, 12), st.integers(0, 9))


@given(cubin=capabilities, device=capabilities)
def test_cubin_rule_properties(cubin: str, device: str) -> None:
    assert cubin_runs_on(device, device)
    if cubin_runs_on(cubin, device):
        assert cubin.split(".")[0] == device.split(".")[0] and V(device) >= V(cubin)
        assert ptx_runs_on(cubin, device)  # whatever a cubin reaches, PTX of it reaches too
    code = ArchList.parse(cubin)
    assert (gpu_code_for(code, device) == "sass") == cubin_runs_on(cubin, device)


@pytest.mark.parametrize(
    "device_id,gpu,sm",
    [
        ("20b0", "A100", "8.0"),
        ("0x2236", "A10", "8.6"),
        ("10de:2330", "H100", "9.0"),
        ("2321", "H100", "9.0"),  # H100 NVL
        ("233B", "H200", "9.0"),
        ("3182", "B300", "10.3"),
        ("31c2", "GB300", "10.3"),
        ("1db4", "V100", "7.0"),
        ("15f8", "P100", "6.0"),
    ],
)
def test_gpu_by_pci_id(device_id: str, gpu: str, sm: str) -> None:
    device = gpu_by_pci_id(KB, device_id)
    assert device is not None and (device.gpu.name, device.sm) == (gpu, sm)


def test_pci_table_covers_every_gpu_and_nothing_else() -> None:
    assert gpu_by_pci_id(KB, "ffff") is None and gpu_by_pci_id(KB, "1002:20b0") is None
    assert {d.gpu.name for d in KB.pci_devices} == {g.name for g in KB.gpus}


def test_staleness() -> None:
    made = date.fromisoformat(KB.generated)
    assert kb_age_days(KB, made + timedelta(days=3)) == 3
    assert staleness_warning(KB, made + timedelta(days=STALE_AFTER_DAYS)) is None
    warning = staleness_warning(KB, made + timedelta(days=STALE_AFTER_DAYS + 1))
    assert warning and f"generated on {KB.generated}" in warning


def test_every_torch_release_supports_python_310_except_2_15() -> None:
    assert all("3.10" in t.python for t in KB.torch if t.version != "2.15.0")
    assert _release("2.15.0").python[0] == "3.11"


def test_driver_rule_native_minor_and_no() -> None:
    assert driver_runs_cuda(KB, "580.126.20", "cu130").mode == "native"
    assert driver_runs_cuda(KB, "580.65.06", "cu130").mode == "minor-version"  # 13.0.3 ships 580.126.20
    assert driver_runs_cuda(KB, "535.54.03", "cu122").mode == "minor-version"  # 12.2.2 ships 535.104.05
    assert driver_runs_cuda(KB, "535.104.05", "cu126").mode == "minor-version"
    assert not driver_runs_cuda(KB, "535.104.05", "cu130").ok
    assert not driver_runs_cuda(KB, "470.82.01", "12.1").ok
    assert driver_runs_cuda(KB, "470.82.01", "11.8").mode == "minor-version"
    assert driver_runs_cuda(KB, "580", "13.0").mode == "native"  # a bare branch compares by branch


def test_recommended_branch_is_lts_r580_unless_too_old() -> None:
    assert recommended_branch(KB, KB.find_cuda("cu117")).branch == "R580"
    assert recommended_branch(KB, KB.find_cuda("cu132")).branch == "R595"
    assert recommended_branch(KB, KB.find_cuda("cu131")).branch == "R595"  # a production branch, not new-feature R590


def test_schema_rejects_broken_rows() -> None:
    broken = json.loads(json.dumps(RAW))
    del broken["cuda"][0]["bundled_driver"]
    with pytest.raises(SchemaError, match="lacks 'bundled_driver'"):
        parse_kb(broken)
    broken = json.loads(json.dumps(RAW))
    broken["torch"][0]["builds"].append("cu999")
    with pytest.raises(SchemaError, match="cu999"):
        parse_kb(broken)
    broken = json.loads(json.dumps(RAW))
    del broken["torch"][0]["arch"]["cu116"]
    with pytest.raises(SchemaError, match="GPU code of exactly its builds"):
        parse_kb(broken)
    broken = json.loads(json.dumps(RAW))
    broken["pci_devices"][0]["gpu"] = "Voodoo5"
    with pytest.raises(SchemaError, match="Voodoo5"):
        parse_kb(broken)
    broken = json.loads(json.dumps(RAW))
    del broken["generated"]
    with pytest.raises(SchemaError, match="generated"):
        parse_kb(broken)


def test_os_rows_name_their_hosts_the_way_ansible_does() -> None:
    assert KB.os_for_host("Debian", "12.5") == KB.os_by_name["debian12"]  # an OS versioned by its major
    assert KB.os_for_host("Rocky", "9.4") == KB.os_by_name["rockylinux9"]
    assert KB.os_for_host("Ubuntu", "22.04") == KB.os_by_name["ubuntu22.04"]
    assert KB.os_for_host("Ubuntu", "22.04.1") is None  # Ubuntu's version is the whole 22.04
    assert KB.os_for_host("AlmaLinux", "9.4") is None
    assert all(o.ansible is not None for o in KB.os if "host" in o.roles)


def test_schema_rejects_broken_os_rows() -> None:
    broken = json.loads(json.dumps(RAW))
    del broken["os"][0]["ansible"]
    with pytest.raises(SchemaError, match="host OS but has no 'ansible' names"):
        parse_kb(broken)
    broken = json.loads(json.dumps(RAW))
    broken["os"][0]["ansible"] = {"distribution": "Ubuntu"}
    with pytest.raises(SchemaError, match=r"os ubuntu20.04: 'ansible' must be"):
        parse_kb(broken)
    broken = json.loads(json.dumps(RAW))
    broken["os"][0]["codename"] = "focal\nRUN id"
    with pytest.raises(SchemaError, match=r"codename .* must be a lower-case word"):
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


def test_the_former_name_gpuenv_compat_still_imports() -> None:
    """gpuenv.compat, the knowledge base's name before it joined gpuenv.kb, is the same names for one release."""
    assert set(compat.__all__) == set(kb.__all__)
    assert all(getattr(compat, name) is getattr(kb, name) for name in kb.__all__)
    assert compat_model.KnowledgeBase is kb.KnowledgeBase
