"""`gpuenv kb refresh` learns the ROCm builds of each torch release from PyTorch's wheel index, as it learns
the CUDA builds: from the recorded snapshot, and from copies with one thing changed at a time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpuenv.kb.derive import builds_on_page
from gpuenv.kb.derive_rocm import torch_rocm_rows
from gpuenv.resources import data_file
from tests.conftest import run_gpuenv
from tests.kb.wheel_index import page

SNAPSHOT = Path(__file__).resolve().parent.parent / "data" / "kb-snapshot"
SHIPPED = json.loads(data_file("compat.json").read_text())


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    return Path(shutil.copytree(SNAPSHOT, tmp_path / "snapshot"))


def _refresh(snapshot: Path, out: Path) -> str:
    done = run_gpuenv("kb", "refresh", "--from", str(snapshot), "-o", str(out))
    assert done.returncode == 0, done.stderr
    return done.stdout


def _rocm_rows(path: Path) -> dict[str, dict[str, Any]]:
    return {row["torch"]: row for row in json.loads(path.read_text())["torch_rocm"]}


def _unchecked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "checked"} for row in rows]


def test_rocm_wheels_are_read_off_their_index_page() -> None:
    text = page("rocm6.2.4", [("2.6.0", ["3.10", "3.12"]), ("2.7.1", ["3.12"])])
    assert builds_on_page(text, "rocm6.2.4", "here") == {"2.6.0", "2.7.1"}
    assert builds_on_page(text, "rocm6.2", "here") == set()  # 6.2 and 6.2.4 are different builds


def test_the_snapshot_reproduces_the_shipped_rocm_rows(tmp_path: Path) -> None:
    out = tmp_path / "new.json"
    _refresh(SNAPSHOT, out)
    proposed = json.loads(out.read_text())
    assert _unchecked(proposed["torch_rocm"]) == _unchecked(SHIPPED["torch_rocm"])
    assert proposed["rocm"] == SHIPPED["rocm"] and {"rocm", "amd_gpus"} <= set(proposed["carried_over"])
    assert "torch_rocm" not in proposed["carried_over"]


def test_a_new_rocm_build_of_a_release_is_learned_with_its_targets_unconfirmed(snapshot: Path, tmp_path: Path) -> None:
    index = snapshot / "pytorch/rocm7.2/torch/index.html"
    wheels = page("rocm7.2", [("2.12.0", ["3.12"])]).split("</h1>\n")[1].split("  </body>")[0]
    index.write_text(index.read_text().replace("  </body>", wheels + "  </body>"))
    out = tmp_path / "new.json"
    stdout = _refresh(snapshot, out)
    assert "+ torch_rocm 2.12.0" in stdout
    assert "torch 2.12.0+rocm7.2: GPU targets carried over from 2.11.0+rocm7.2 (unconfirmed)" in stdout
    row = _rocm_rows(out)["2.12.0"]
    assert row["builds"] == {"rocm7.2": SHIPPED["torch_rocm"][-1]["builds"]["rocm7.2"]}
    assert row["unconfirmed"] == ["arch:rocm7.2"] and row["source"] == "pytorch-matrix"
    resolved = run_gpuenv("--data", str(out), "resolve", "--torch", "2.12.0", "--rocm", "7.2", "--json")
    assert resolved.returncode == 0, resolved.stderr
    assert json.loads(resolved.stdout)["index_url"] == "https://download.pytorch.org/whl/rocm7.2"


def test_a_rocm_build_that_disappears_is_dropped_and_an_unread_page_keeps_its_rows(
    snapshot: Path, tmp_path: Path
) -> None:
    rocm63 = snapshot / "pytorch/rocm6.3/torch/index.html"
    rocm63.write_text("\n".join(line for line in rocm63.read_text().splitlines() if "torch-2.9.1+" not in line) + "\n")
    shutil.rmtree(snapshot / "pytorch/rocm5.5")
    out = tmp_path / "new.json"
    stdout = _refresh(snapshot, out)
    assert "~ torch_rocm 2.9.1 builds" in stdout
    rows = _rocm_rows(out)
    assert list(rows["2.9.1"]["builds"]) == ["rocm6.4"]
    assert list(rows["2.1.0"]["builds"]) == ["rocm5.5", "rocm5.6"]  # its page was not read: nothing is known


def test_a_release_without_targets_anywhere_is_left_out_with_a_note() -> None:
    derived = torch_rocm_rows([], {"2.9.1": {"rocm6.4"}}, {"rocm6.4"}, ["2.9.1"], "pytorch-wheel-index", "2026-12-01")
    assert derived.rows == []
    assert derived.notes == ["torch 2.9.1+rocm6.4: no GPU targets known for it; left out"]


def test_a_file_written_before_rocm_gains_no_rocm_rows(tmp_path: Path) -> None:
    old = {k: v for k, v in SHIPPED.items() if k not in ("rocm", "torch_rocm", "amd_gpus")}
    current = tmp_path / "old.json"
    current.write_text(json.dumps(old))
    out = tmp_path / "new.json"
    done = run_gpuenv("--data", str(current), "kb", "refresh", "--from", str(SNAPSHOT), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "torch_rocm" not in json.loads(out.read_text())
