"""`gpuenv kb refresh` learns which builds publish each torch release for aarch64 from the wheel index's file
names: from the recorded snapshot (made from the KB: it reproduces the shipped rows), and from hand-written
pages (tests/data/kb-aarch64-index, not made from the KB) that gain, lose, carry and inherit builds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpuenv.kb import SchemaError, parse_kb
from gpuenv.kb.derive import ArchListing, Wheel, builds_on_page, wheels_on_page
from gpuenv.kb.derive_cpu_arch import torch_cpu_arch_rows
from gpuenv.resources import data_file
from tests.conftest import run_gpuenv

DATA = Path(__file__).resolve().parent.parent / "data"
SNAPSHOT, HAND_WRITTEN = DATA / "kb-snapshot", DATA / "kb-aarch64-index"
SHIPPED = json.loads(data_file("compat.json").read_text())
ARM_ROWS = {row["torch"]: row for row in SHIPPED["torch_cpu_arch"]}


def _unchecked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "checked"} for row in rows]


def _refresh(snapshot: Path, out: Path, *extra: str) -> dict[str, Any]:
    done = run_gpuenv("kb", "refresh", "--from", str(snapshot), "-o", str(out), "--json", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_file_names_give_the_cpu_architectures() -> None:
    page = (HAND_WRITTEN / "cu130/torch/index.html").read_text()
    assert wheels_on_page(page, "torch", "here") == [
        Wheel("2.9.0", "cu130", frozenset({"x86_64"})),
        Wheel("2.9.0", "cu130", frozenset({"aarch64"})),
        Wheel("2.9.0", "cu130", frozenset({"aarch64"})),  # cp313t: a free-threaded CPython wheel counts too
    ]
    pypi_style = (HAND_WRITTEN / "cu121/torch/index.html").read_text()
    assert wheels_on_page(pypi_style, "torch", "here")[1] == Wheel("2.3.1", None, frozenset({"aarch64"}))
    assert wheels_on_page(pypi_style, "torchvision", "here") == []  # another project's names are not its own
    windows = (HAND_WRITTEN / "cu128/torch/index.html").read_text()
    assert [w.cpu_arches for w in wheels_on_page(windows, "torch", "here")] == [frozenset({"x86_64"})]


def test_the_torch_rows_read_x86_64_wheels_only_as_before() -> None:
    assert builds_on_page((HAND_WRITTEN / "cu130/torch/index.html").read_text(), "cu130", "here") == {"2.9.0"}
    assert builds_on_page((HAND_WRITTEN / "cu129/torch/index.html").read_text(), "cu129", "here") == set()
    assert builds_on_page((HAND_WRITTEN / "cu124/torch/index.html").read_text(), "cu124", "here") == {"2.5.1"}


def test_the_snapshot_reproduces_the_shipped_aarch64_rows(tmp_path: Path) -> None:
    assert any("aarch64" in p.read_text() for p in (SNAPSHOT / "pytorch").rglob("index.html"))
    result = _refresh(SNAPSHOT, tmp_path / "new.json")
    proposed = json.loads((tmp_path / "new.json").read_text())
    assert _unchecked(proposed["torch_cpu_arch"]) == _unchecked(SHIPPED["torch_cpu_arch"])
    assert not [c for c in result["changes"] if c["table"] == "torch_cpu_arch"]
    assert "torch_cpu_arch" not in result["carried_over"]
    assert {"torch_cpu_arch.plain_build", "cuda_cpu_arch"} <= set(result["carried_over"])


@pytest.fixture
def hand_written(tmp_path: Path) -> Path:
    """The snapshot with its CUDA builds' pages replaced by the hand-written ones, cited as the index itself."""
    snapshot = Path(shutil.copytree(SNAPSHOT, tmp_path / "snapshot"))
    for build in (snapshot / "pytorch").glob("cu*"):
        shutil.rmtree(build)
    shutil.copytree(HAND_WRITTEN, snapshot / "pytorch", dirs_exist_ok=True)
    info = json.loads((snapshot / "snapshot.json").read_text())
    (snapshot / "snapshot.json").write_text(json.dumps({**info, "cite": {}}))
    return snapshot


def test_hand_written_pages_gain_lose_carry_and_inherit_builds(hand_written: Path, tmp_path: Path) -> None:
    out = tmp_path / "new.json"
    result = _refresh(hand_written, out)
    rows = {row["torch"]: row for row in json.loads(out.read_text())["torch_cpu_arch"]}
    old = ARM_ROWS["2.9.0"]["builds"]
    assert rows["2.9.0"]["builds"] == {
        "cu126": old["cu126"],  # no cu126 page: not read, carried
        "cu129": ARM_ROWS["2.8.0"]["builds"]["cu129"],  # gained: 2.8.0's list, unconfirmed
        "cu130": old["cu130"],  # still listed: kept
    }  # cu128 lists 2.9.0 for x86_64 and Windows only: lost; cu132 is gained with no list known: left out
    assert rows["2.9.0"]["unconfirmed"] == ["arch:cu129"]
    assert rows["2.9.0"]["source"].endswith("; pytorch-wheel-index")
    assert rows["2.9.0"]["companions_missing"] == {"cu130": ["torchaudio"]}  # torchvision 0.24.0 has one
    assert rows["2.5.1"]["builds"] == ARM_ROWS["2.5.1"]["builds"]  # no +cu124 on the name: kept, not settled
    assert rows["2.4.0"]["builds"] == {}  # the cu124 page lists no 2.4.0 aarch64 wheel any more
    assert rows["2.3.1"]["builds"] == {}  # a PyPI-style name without +cu121 adds no build
    notes = result["notes"]
    assert "torch 2.9.0 (aarch64): cu129's GPU code carried over from 2.8.0 (unconfirmed)" in notes
    assert "torch 2.9.0 (aarch64): cu132 is listed, but no GPU code is known for it; left out" in notes
    assert "torch 2.9.0 (aarch64): cu128 lists no aarch64 wheel of it any more; left out" in notes
    assert any(n.startswith("torch 2.3.1 (aarch64): cu121's page lists wheels without +cu121") for n in notes)
    changed = {(c["key"], c["field"]): c for c in result["changes"] if c["table"] == "torch_cpu_arch"}
    assert changed[("2.9.0", "builds")]["old"] == old
    assert changed[("2.9.0", "companions_missing")]["new"] == {"cu130": ["torchaudio"]}


def test_the_changes_are_shown_to_a_reader(hand_written: Path, tmp_path: Path) -> None:
    done = run_gpuenv("kb", "refresh", "--from", str(hand_written), "-o", str(tmp_path / "new.json"))
    assert done.returncode == 0, done.stderr
    assert "~ torch_cpu_arch 2.9.0 companions_missing: none → {cu130: torchaudio}  [from pytorch-wheel-index]" in (
        done.stdout
    )
    assert "~ torch_cpu_arch 2.9.0 builds: {cu126: 8.0;9.0, cu128:" in done.stdout
    assert "- torch_cpu_arch 2.11.0: no longer derived; was builds {cu126: " in done.stdout  # its plain cu130 is gone
    assert "[no aarch64 row derived: see the notes]" in done.stdout
    resolved = run_gpuenv("--data", str(tmp_path / "new.json"), "resolve", "--gpu", "GH200", "--torch", "2.9.0")
    assert resolved.returncode == 0, resolved.stderr


def _listing(**builds: bool) -> ArchListing:
    on_page = {"2.15.0": builds, "2.16.0": builds}
    return ArchListing(on_page, frozenset(builds), {"torchvision": {b: {"0.31.0"} for b in builds}})


def test_a_release_new_on_the_architecture_takes_the_plain_build_before_it_unconfirmed() -> None:
    torch = [{"version": "2.15.0"}, {"version": "2.16.0", "torchvision": "0.31.0", "torchaudio": None}]
    derived = torch_cpu_arch_rows([ARM_ROWS["2.15.0"]], _listing(cu132=True), torch, "aarch64", "idx", "2026-12-07")
    new = derived.rows[-1]
    assert new["builds"] == {"cu132": ARM_ROWS["2.15.0"]["builds"]["cu132"]}
    assert new["plain_build"] == "cu132" and new["unconfirmed"] == ["arch:cu132", "plain_build"]
    assert "companions_missing" not in new and new["source"] == "idx"
    assert "torch 2.16.0 (aarch64): new on aarch64; PyPI's plain wheel taken as cu132 (unconfirmed)" in derived.notes


def test_a_release_whose_plain_build_is_no_longer_listed_is_left_out() -> None:
    torch = [{"version": "2.15.0"}]
    listing = ArchListing({}, frozenset({"cu132"}))
    derived = torch_cpu_arch_rows([ARM_ROWS["2.15.0"]], listing, torch, "aarch64", "idx", "2026-12-07")
    assert derived.rows == []
    assert (
        derived.notes[-1]
        == "torch 2.15.0 (aarch64): PyPI's plain wheel is cu132, a build its pages do not list; left out"
    )


def test_companions_missing_is_checked_on_load() -> None:
    def with_row(**extra: Any) -> dict[str, Any]:
        rows = [{**row, **extra} if row["torch"] == "2.9.0" else row for row in SHIPPED["torch_cpu_arch"]]
        return {**SHIPPED, "torch_cpu_arch": rows}

    loaded = parse_kb(with_row(companions_missing={"cu130": ["torchaudio"]}))
    assert next(t for t in loaded.torch_cpu_arch if t.torch == "2.9.0").companions_missing == {"cu130": ("torchaudio",)}
    with pytest.raises(SchemaError, match="companions_missing must map builds"):
        parse_kb(with_row(companions_missing={"cu130": ["torchtext"]}))
    with pytest.raises(SchemaError, match="a build the row does not have"):
        parse_kb(with_row(companions_missing={"cu132": ["torchaudio"]}))


def test_a_file_written_before_the_cpu_architecture_gains_no_rows(tmp_path: Path) -> None:
    old = {k: v for k, v in SHIPPED.items() if k not in ("torch_cpu_arch", "cuda_cpu_arch")}
    old["gpus"] = [{k: v for k, v in g.items() if k != "cpu_arch"} for g in SHIPPED["gpus"]]
    current = tmp_path / "old.json"
    current.write_text(json.dumps(old))
    out = tmp_path / "new.json"
    done = run_gpuenv("--data", str(current), "kb", "refresh", "--from", str(SNAPSHOT), "-o", str(out))
    assert done.returncode == 0, done.stderr
    proposed = json.loads(out.read_text())
    assert "torch_cpu_arch" not in proposed and "torch_cpu_arch.plain_build" not in proposed["carried_over"]


def test_a_companion_page_not_read_keeps_what_the_row_said() -> None:
    said = {**ARM_ROWS["2.9.0"], "companions_missing": {"cu130": ["torchaudio"]}}
    torch = [{"version": "2.9.0", "torchvision": "0.24.0", "torchaudio": "2.9.0"}]
    listed = {"2.9.0": {"cu126": True, "cu128": True, "cu130": True}}
    unread = ArchListing(listed, frozenset({"cu126", "cu128", "cu130"}))
    row = torch_cpu_arch_rows([said], unread, torch, "aarch64", "idx", "2026-12-07").rows[0]
    assert row["companions_missing"] == {"cu130": ["torchaudio"]}
    both = {p: {b: {"0.24.0", "2.9.0"} for b in ("cu126", "cu128", "cu130")} for p in ("torchvision", "torchaudio")}
    read = ArchListing(listed, frozenset({"cu126", "cu128", "cu130"}), both)
    assert "companions_missing" not in torch_cpu_arch_rows([said], read, torch, "aarch64", "idx", "x").rows[0]


def test_a_build_whose_companion_has_no_wheel_there_is_never_picked_unasked(tmp_path: Path) -> None:
    rows = [
        {**row, "companions_missing": {"cu130": ["torchvision"]}} if row["torch"] == "2.14.1" else row
        for row in SHIPPED["torch_cpu_arch"]
    ]
    data = tmp_path / "kb.json"
    data.write_text(json.dumps({**SHIPPED, "torch_cpu_arch": rows}))
    control = json.loads(run_gpuenv("resolve", "--gpu", "GH200", "--json").stdout)
    assert (control["torch"], control["build"]) == ("2.14.1", "cu130")  # picked when nothing is missing
    done = run_gpuenv("--data", str(data), "resolve", "--gpu", "GH200", "--json")
    assert done.returncode == 0, done.stderr
    picked = json.loads(done.stdout)
    assert (picked["torch"], picked["build"]) != ("2.14.1", "cu130")
    rejected = {r["choice"]: r["why"] for r in picked["rejected"]}
    assert "not settled" in rejected["torch 2.14.1+cu130"]
    asked = json.loads(
        run_gpuenv("--data", str(data), "resolve", "--gpu", "GH200", "--torch", "2.14.1+cu130", "--json").stdout
    )
    assert any("torch 2.14.1 build cu130" in w for w in asked["warnings"])  # given, it is used and said unconfirmed
