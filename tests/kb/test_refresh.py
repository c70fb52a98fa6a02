"""`gpuenv kb refresh` end to end: the recorded snapshot reproduces the shipped torch rows, and the same
snapshot served on 127.0.0.1 (tests/kb/server.py) with one thing changed or broken at a time."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from gpuenv.resources import data_file
from tests.conftest import run_gpuenv
from tests.kb.nvidia_index import write_drivers, write_indexes
from tests.kb.server import SnapshotServer, serving
from tests.kb.wheel_index import page

SNAPSHOT = Path(__file__).resolve().parent.parent / "data" / "kb-snapshot"
SHIPPED = json.loads(data_file("compat.json").read_text())


def _today() -> str:
    """The day a refresh over the network stamps on every row it checked (`checked`)."""
    return date.today().isoformat()


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    """A private copy of the recorded snapshot, to change."""
    return Path(shutil.copytree(SNAPSHOT, tmp_path / "snapshot"))


def _refresh_over_http(server: SnapshotServer, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    bases = server.bases()
    urls = [arg for index, url in bases.items() for arg in (f"--{index}-url", url)]
    return run_gpuenv("kb", "refresh", "-o", str(out), *urls, "--timeout", "5", *extra)


def _rows(path: Path) -> dict[str, dict[str, Any]]:
    return {row["version"]: row for row in json.loads(path.read_text())["torch"]}


def _as_refreshed(rows: list[dict[str, Any]], recorded: str) -> list[dict[str, Any]]:
    """The rows as a refresh from a snapshot recorded on `recorded` writes them: it stamps that date on every
    cuda and driver row it reads, so a row checked by hand after the recording comes back with the earlier date."""
    return [{**row, "checked": recorded} if row["checked"] > recorded else row for row in rows]


def test_snapshot_reproduces_the_shipped_torch_rows(tmp_path: Path) -> None:
    out = tmp_path / "new.json"
    result = run_gpuenv("kb", "refresh", "--from", str(SNAPSHOT), "-o", str(out))
    assert result.returncode == 0, result.stderr
    proposed = json.loads(out.read_text())
    assert proposed["torch"] == SHIPPED["torch"]
    recorded = json.loads((SNAPSHOT / "snapshot.json").read_text())["recorded"]
    assert proposed["cuda"] == _as_refreshed(SHIPPED["cuda"], recorded) and "cuda.cudnn" in proposed["carried_over"]
    assert proposed["driver_branches"] == _as_refreshed(SHIPPED["driver_branches"], recorded)
    for table in ("architectures", "gpus", "pci_devices", "os"):
        assert proposed[table] == SHIPPED[table]
        assert table in proposed["carried_over"]
    assert "no change to the torch, cuda and driver rows" in result.stdout


def add_torch_release(root: Path, version: str, build: str, cuda_pin: str, pythons: list[str]) -> None:
    """A new torch release in the snapshot, in each index's own format: PyPI's project and Simple JSON,
    its wheel's METADATA, and PyTorch's wheel index page of its build."""
    project_file = root / "pypi/pypi/torch/json"
    project = json.loads(project_file.read_text())
    names = [
        f"torch-{version}-cp{p.replace('.', '')}-cp{p.replace('.', '')}-manylinux_2_28_x86_64.whl" for p in pythons
    ]
    project["releases"][version] = [
        {"filename": n, "packagetype": "bdist_wheel", "python_version": n.split("-")[2], "requires_python": ">=3.11",
         "size": 900_000_000, "upload_time_iso_8601": "2026-12-09T15:00:00Z", "yanked": False, "yanked_reason": None}
        for n in names
    ]  # fmt: skip
    project_file.write_text(json.dumps(project))
    simple_file = root / "pypi/simple/torch/index.json"
    simple = json.loads(simple_file.read_text())
    path = f"packages/aa/bb/{'c' * 60}/{names[0]}"
    simple["versions"].append(version)
    simple["files"].append(
        {"filename": names[0], "hashes": {"sha256": "0" * 64}, "requires-python": ">=3.11", "size": 900_000_000,
         "upload-time": "2026-12-09T15:00:00Z", "url": f"https://files.pythonhosted.org/{path}", "yanked": False}
    )  # fmt: skip
    simple_file.write_text(json.dumps(simple))
    metadata = root / "pypi-files" / (path + ".METADATA")
    metadata.parent.mkdir(parents=True)
    metadata.write_text(
        f"Metadata-Version: 2.4\nName: torch\nVersion: {version}\nRequires-Python: >=3.11\n"
        f'Requires-Dist: cuda-toolkit[cudart,nvrtc]=={cuda_pin}; platform_system == "Linux"\n'
    )
    index_page = root / f"pytorch/{build}/torch/index.html"
    text = index_page.read_text()
    index_page.write_text(
        text.replace(
            "  </body>", page(build, [(version, pythons)]).split("</h1>\n")[1].split("  </body>")[0] + "  </body>"
        )
    )


@pytest.mark.integration  # a local HTTP index server
def test_a_new_release_appears_in_the_diff_and_resolves(snapshot: Path, tmp_path: Path) -> None:
    add_torch_release(snapshot, "2.16.0", "cu132", "13.2.2", ["3.11", "3.12", "3.13", "3.14", "3.15"])
    out = tmp_path / "new.json"
    with serving(snapshot) as server:
        result = _refresh_over_http(server, out)
    assert result.returncode == 0, result.stderr
    added = "+ torch 2.16.0: torchvision none, torchaudio 2.11.1, builds cu132, default_build cu132"
    assert f"{added}  [from {server.url}/pypi/pypi/torch/json]" in result.stdout
    assert "torch 2.16.0+cu132: GPU code carried over from 2.15.0 (unconfirmed)" in result.stdout
    row = _rows(out)["2.16.0"]
    assert row["arch"] == {"cu132": "7.5;8.0;8.6;9.0;10.0;12.0+PTX"}
    assert row["unconfirmed"] == ["arch:cu132", "torchaudio"]
    assert row["source"] == "pypi; pypi-metadata; pytorch-wheel-index; torchaudio-maintenance"
    resolved = run_gpuenv("--data", str(out), "resolve", "--torch", "2.16.0", "--json")
    assert resolved.returncode == 0, resolved.stderr
    stack = json.loads(resolved.stdout)
    assert stack["torch"] == "2.16.0" and stack["build"] == "cu132"


@pytest.mark.integration  # a local HTTP index server
def test_a_build_that_disappears_is_named_with_its_source(snapshot: Path, tmp_path: Path) -> None:
    cu129 = snapshot / "pytorch/cu129/torch/index.html"
    cu129.write_text("\n".join(line for line in cu129.read_text().splitlines() if "torch-2.12.1+" not in line) + "\n")
    out = tmp_path / "new.json"
    with serving(snapshot) as server:
        result = _refresh_over_http(server, out)
    assert result.returncode == 0, result.stderr
    assert "~ torch 2.12.1 builds: cu126,cu129,cu130,cu132 → cu126,cu130,cu132" in result.stdout
    assert f"{server.url}/pytorch/cu126/torch/" in result.stdout
    row = _rows(out)["2.12.1"]
    assert "cu129" not in row["arch"] and "build:cu129" not in row["unconfirmed"]  # the doubt is settled


@pytest.mark.integration  # a local HTTP index server
def test_redirects_are_followed(snapshot: Path, tmp_path: Path) -> None:
    out = tmp_path / "new.json"
    with serving(snapshot, faults={"/pypi/": "redirect", "/pytorch/cu126/": "redirect"}) as server:
        result = _refresh_over_http(server, out)
    assert result.returncode == 0, result.stderr
    assert any(r.startswith("/moved/pypi/pypi/torch/json") for r in server.requests)
    assert _rows(out) == {v: _as_read_live(row) for v, row in SHIPPED_ROWS.items()}


SHIPPED_ROWS = {row["version"]: row for row in SHIPPED["torch"]}


def _as_read_live(row: dict[str, Any]) -> dict[str, Any]:
    """A shipped row as a refresh over the network writes it: the builds cite the wheel index it read,
    and the row is checked today."""
    return {**_checked_today(row), "source": row["source"].replace("pytorch-matrix", "pytorch-wheel-index")}


def _checked_today(row: dict[str, Any]) -> dict[str, Any]:
    """A shipped row as a refresh over the network (or from what it recorded) writes it: checked today."""
    return {**row, "checked": _today()}


@pytest.mark.parametrize(
    "fault,where,message",
    [
        ("down", "/pytorch/cu126/", "PyTorch's wheel index did not answer"),
        ("down", "/pypi/pypi/torchvision/", "the Python package index did not answer"),
        ("garbage", "/pypi/pypi/torch/json", "answered bytes that are not UTF-8 text"),
        ("garbage", "/pypi-files/packages/", "is not a readable wheel"),
        ("slow", "/pypi/simple/torchaudio/", "timed out after 0.5 s (2 tries)"),
        ("down", "/dockerhub/", "Docker Hub's tag API did not answer"),
        ("slow", "/dockerhub/v2/repositories/nvidia/cuda/tags?page=3", "timed out after 0.5 s (2 tries)"),
        ("garbage", "/dockerhub/v2/repositories/nvidia/cuda/tags?page=2", "answered bytes that are not UTF-8 text"),
        ("down", "/cuda-redist/", "NVIDIA's CUDA redist index did not answer"),
        ("garbage", "/cuda-redist/redistrib_12.6.3.json", "answered bytes that are not UTF-8 text"),
        ("down", "/nvidia-drivers/", "NVIDIA's driver release list did not answer"),
        ("slow", "/nvidia-drivers/releases.json", "timed out after 0.5 s (2 tries)"),
    ],
)
@pytest.mark.integration  # a local HTTP index server
def test_an_index_that_fails_is_named_and_nothing_is_written(
    snapshot: Path, tmp_path: Path, fault: str, where: str, message: str
) -> None:
    out = tmp_path / "new.json"
    out.write_text("the previous proposal\n")
    with serving(snapshot, faults={where: fault}, slow_s=1.5) as server:
        result = _refresh_over_http(server, out, "--timeout", "0.5", "--retries", "1")
    assert result.returncode == 3, result.stdout + result.stderr
    assert message in result.stderr and server.url in result.stderr
    assert "Traceback" not in result.stderr
    assert out.read_text() == "the previous proposal\n"


def test_garbage_that_is_text_is_reported_not_merged(snapshot: Path, tmp_path: Path) -> None:
    (snapshot / "pytorch/cu130/torch/index.html").write_text('{"not": "a PEP 503 page"}')
    result = run_gpuenv("kb", "refresh", "--from", str(snapshot), "-o", str(tmp_path / "new.json"))
    assert result.returncode == 3
    assert "snapshot/pytorch/cu130/torch/ is not a PEP 503 HTML page" in result.stderr
    assert not (tmp_path / "new.json").exists()


def test_a_wheel_without_its_cuda_pin_is_malformed(snapshot: Path, tmp_path: Path) -> None:
    metadata = next(snapshot.glob("pypi-files/**/torch-2.13.0-*.METADATA"))
    metadata.write_text("\n".join(x for x in metadata.read_text().splitlines() if "cuda-toolkit" not in x) + "\n")
    result = run_gpuenv("kb", "refresh", "--from", str(snapshot), "-o", str(tmp_path / "new.json"))
    assert result.returncode == 3
    assert "torch 2.13.0: its METADATA pins no CUDA runtime" in result.stderr
    assert not (tmp_path / "new.json").exists()


@pytest.mark.integration  # a local HTTP index server
def test_record_over_http_then_read_back(snapshot: Path, tmp_path: Path) -> None:
    """--record writes what it read (METADATA through range reads of real zips); --from reads it back."""
    recorded, first, second = tmp_path / "recorded", tmp_path / "first.json", tmp_path / "second.json"
    with serving(snapshot) as server:
        result = _refresh_over_http(server, first, "--record", str(recorded))
    assert result.returncode == 0, result.stderr
    assert any("Range" for _ in server.requests)
    again = run_gpuenv("kb", "refresh", "--from", str(recorded), "-o", str(second))
    assert again.returncode == 0, again.stderr
    assert json.loads(first.read_text()) == json.loads(second.read_text())
    assert json.loads((recorded / "snapshot.json").read_text())["cite"]["pytorch"] == "pytorch-wheel-index"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--from", "X", "--record", "Y"], "--from and --record exclude each other"),
        (["--pypi-url", "ftp://mirror"], "is not an index base URL"),
        (["--from", str(SNAPSHOT), "--pytorch-url", "http://127.0.0.1:9/whl"], "do not apply to --from DIR"),
        (["-o", str(data_file("compat.json"))], "never overwrites the shipped knowledge base"),
        (["--from", "/nonexistent-snapshot"], "snapshot.json"),
    ],
)
def test_bad_requests_exit_2(args: list[str], message: str) -> None:
    result = run_gpuenv("kb", "refresh", *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr


def test_help_imports_no_http_client() -> None:
    code = (
        "import sys; from gpuenv.cli import cli; "
        "cli.main(['kb', 'refresh', '--help'], standalone_mode=False); print('httpx' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip().endswith("False"), out.stdout + out.stderr


def test_json_result(snapshot: Path, tmp_path: Path) -> None:
    add_torch_release(snapshot, "2.16.0", "cu132", "13.2.2", ["3.11", "3.12"])
    result = run_gpuenv("kb", "refresh", "--from", str(snapshot), "-o", str(tmp_path / "new.json"), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(c["kind"], c["key"]) for c in report["changes"]] == [("added", "2.16.0")]
    assert report["changes"][0]["source"].endswith("pypi/pypi/torch/json")
    assert report["generated"] == "2026-11-30" and "gpus" in report["carried_over"]


def _cuda_rows(**changed: dict[str, Any]) -> list[dict[str, Any]]:
    """The shipped cuda rows, with some fields of some minors changed ({"12.0": {"deleted_tags": [...]}})."""
    return [{**row, **changed.get(row["version"], {})} for row in SHIPPED["cuda"]]


def _cuda(path: Path) -> dict[str, dict[str, Any]]:
    return {row["version"]: row for row in json.loads(path.read_text())["cuda"]}


@pytest.mark.integration  # a local HTTP index server
def test_a_deleted_tag_is_marked_and_named(snapshot: Path, tmp_path: Path) -> None:
    gone = {"12.0": {"deleted_tags": ["12.0.0"]}, "12.1": {"deleted_tags": ["12.1.0", "12.1.1"]}}
    write_indexes(snapshot, _cuda_rows(**gone))
    out = tmp_path / "new.json"
    with serving(snapshot) as server:
        result = _refresh_over_http(server, out)
    assert result.returncode == 0, result.stderr
    hub = f"{server.url}/dockerhub/v2/repositories/nvidia/cuda/tags"
    assert f"~ cuda 12.0 deleted_tags: [] → 12.0.0  [from {hub}]" in result.stdout
    assert f"~ cuda 12.1 eol: False → True  [from {hub} (every tag of the minor gone)]" in result.stdout
    rows = _cuda(out)
    assert rows["12.0"]["deleted_tags"] == ["12.0.0"] and rows["12.0"]["eol"] is False
    assert rows["12.1"]["deleted_tags"] == ["12.1.0", "12.1.1"] and rows["12.1"]["eol"] is True
    pages = len(list((snapshot / "dockerhub").rglob("tags@*")))  # the tag pages written above
    assert sum(r.startswith("/dockerhub/") for r in server.requests) == pages  # every page, following `next`


@pytest.mark.integration  # a local HTTP index server
def test_a_cuda_update_release_brings_its_driver(snapshot: Path, tmp_path: Path) -> None:
    write_indexes(snapshot, _cuda_rows(**{"13.2": {"toolkit": "13.2.3", "bundled_driver": "595.80.02"}}))
    out = tmp_path / "new.json"
    with serving(snapshot) as server:
        result = _refresh_over_http(server, out)
    assert result.returncode == 0, result.stderr
    manifest = f"{server.url}/cuda-redist/redistrib_13.2.3.json"
    assert f"~ cuda 13.2 toolkit: 13.2.2 → 13.2.3  [from {server.url}/cuda-redist/]" in result.stdout
    assert f"~ cuda 13.2 bundled_driver: 595.71.05 → 595.80.02  [from {manifest}]" in result.stdout
    row = _cuda(out)["13.2"]
    sources = row["source"].split("; ")  # the runfile's URL replaced where it stands among the row's sources
    assert any(s.endswith("/cuda/13.2.3/local_installers/cuda_13.2.3_595.80.02_linux.run") for s in sources)
    assert not any("cuda_13.2.2_" in s for s in sources)
    shipped = next(r for r in SHIPPED["cuda"] if r["version"] == "13.2")
    assert (row["cudnn"], row["images"]) == (shipped["cudnn"], shipped["images"])  # carried over


def test_a_next_link_off_the_tag_api_is_refused(snapshot: Path, tmp_path: Path) -> None:
    first = snapshot / "dockerhub/v2/repositories/nvidia/cuda/tags@page_size=100"
    page = json.loads(first.read_text())
    first.write_text(json.dumps({**page, "next": "https://pypi.org/pypi/torch/json"}))
    result = run_gpuenv("kb", "refresh", "--from", str(snapshot), "-o", str(tmp_path / "new.json"))
    assert result.returncode == 3
    assert "links its next page outside the tag API: https://pypi.org/pypi/torch/json" in result.stderr
    assert not (tmp_path / "new.json").exists()


def test_a_manifest_without_its_driver_is_malformed(snapshot: Path, tmp_path: Path) -> None:
    manifest = snapshot / "cuda-redist/redistrib_12.8.1.json"
    manifest.write_text(json.dumps({"release_label": "12.8.1", "release_product": "cuda"}))
    result = run_gpuenv("kb", "refresh", "--from", str(snapshot), "-o", str(tmp_path / "new.json"))
    assert result.returncode == 3
    assert "redistrib_12.8.1.json names no nvidia_driver version" in result.stderr


@pytest.mark.integration  # a local HTTP index server
def test_cuda_indexes_redirect(snapshot: Path, tmp_path: Path) -> None:
    out = tmp_path / "new.json"
    with serving(snapshot, faults={"/dockerhub/": "redirect", "/cuda-redist/": "redirect"}) as server:
        result = _refresh_over_http(server, out)
    assert result.returncode == 0, result.stderr
    assert any(r.startswith("/moved/dockerhub/") for r in server.requests)
    assert json.loads(out.read_text())["cuda"] == [_checked_today(row) for row in SHIPPED["cuda"]]


@pytest.mark.integration  # a local HTTP index server
def test_a_driver_branch_appears_and_one_moves_on(snapshot: Path, tmp_path: Path) -> None:
    branches = [{**b, "latest": "580.180.01"} if b["branch"] == "R580" else b for b in SHIPPED["driver_branches"]]
    write_drivers(snapshot, [*branches, {"branch": "R625", "kind": "new-feature", "latest": "625.20.04"}])
    out = tmp_path / "new.json"
    with serving(snapshot, faults={"/nvidia-drivers/": "redirect"}) as server:
        result = _refresh_over_http(server, out)
    assert result.returncode == 0, result.stderr
    where = f"{server.url}/nvidia-drivers/releases.json"
    assert "+ driver R625: " in result.stdout and f"[from {where}]" in result.stdout
    assert f"~ driver R580 latest: 580.173.02 → 580.180.01  [from {where}]" in result.stdout
    rows = {row["branch"]: row for row in json.loads(out.read_text())["driver_branches"]}
    assert rows["R625"] == {"branch": "R625", "lts": False, "kind": "new-feature", "latest": "625.20.04",
                            "source": "nvidia-driver-releases", "checked": _today()}  # fmt: skip
    resolved = run_gpuenv("--data", str(out), "resolve", "--torch", "2.12.0", "--json")
    assert resolved.returncode == 0, resolved.stderr


def test_a_driver_list_without_types_is_malformed(snapshot: Path, tmp_path: Path) -> None:
    (snapshot / "nvidia-drivers/releases.json").write_text(json.dumps({"580": {"driver_info": []}}))
    result = run_gpuenv("kb", "refresh", "--from", str(snapshot), "-o", str(tmp_path / "new.json"))
    assert result.returncode == 3
    assert "releases.json: branch '580' has no known type or no driver_info list" in result.stderr
    assert not (tmp_path / "new.json").exists()


@pytest.mark.integration  # a local HTTP index server
def test_tag_pages_that_link_the_mirror_record_and_read_back(snapshot: Path, tmp_path: Path) -> None:
    """A mirror whose `next` links name the mirror itself: followed live, and again from the recording."""
    recorded, first, second = tmp_path / "recorded", tmp_path / "first.json", tmp_path / "second.json"
    with serving(snapshot) as server:
        for page in snapshot.glob("dockerhub/v2/repositories/nvidia/cuda/tags@*"):
            page.write_text(page.read_text().replace("https://hub.docker.com", f"{server.url}/dockerhub"))
        result = _refresh_over_http(server, first, "--record", str(recorded))
    assert result.returncode == 0, result.stderr
    again = run_gpuenv("kb", "refresh", "--from", str(recorded), "-o", str(second))
    assert again.returncode == 0, again.stderr
    assert json.loads(second.read_text())["cuda"] == [_checked_today(row) for row in SHIPPED["cuda"]]
