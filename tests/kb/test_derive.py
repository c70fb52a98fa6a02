"""The pure parts of kb refresh: the pairing rule, page and METADATA parsing, snapshot paths."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import pytest

from gpuenv.kb.derive import Malformed, Upstream, builds_on_page, default_build, pair, requires_dist
from gpuenv.kb.sources import IndexFailed, Request, read_wheel_metadata, snapshot_key, split_url
from tests.kb.wheel_index import page


def _project(*versions: str, yanked: tuple[str, ...] = ()) -> dict[str, Any]:
    files = {v: [{"filename": f"x-{v}-py3-none-any.whl", "yanked": v in yanked}] for v in versions}
    return {"info": {}, "releases": files}


def _upstream(package: str, requires: dict[str, list[str]], yanked: tuple[str, ...] = ()) -> Upstream:
    return Upstream({package: _project(*requires, yanked=yanked)}, {package: requires}, {}, {}, {})


def test_a_pin_decides_even_across_the_release_line() -> None:
    up = _upstream("torchvision", {"0.15.0": ["torch==2.0.0"], "0.15.1": ["torch (==2.0.0)"]}, yanked=("0.15.0",))
    assert pair("torchvision", "2.0.0", up, None).version == "0.15.1"  # 0.15.0 is yanked


def test_a_range_pairs_by_the_release_line_and_says_so() -> None:
    up = _upstream("torchvision", {"0.29.0": ["torch==2.14.0"], "0.29.1": ["torch>=2.14.0"], "0.29.2": ["torch>=2.14"]})
    paired = pair("torchvision", "2.14.1", up, None)
    assert (paired.version, paired.how) == ("0.29.1", "range")
    assert pair("torchvision", "2.15.0", up, None).version is None  # 0.29.2 admits it, but is not its line


def test_a_companion_in_maintenance_serves_later_releases() -> None:
    up = _upstream("torchaudio", {"2.10.0": ["torch==2.10.0"], "2.11.0": [], "2.11.1": ["torch>=2.11"]})
    maintenance = {"since": "2.11", "source": "torchaudio-maintenance"}
    assert pair("torchaudio", "2.11.0", up, maintenance).how == "line"
    paired = pair("torchaudio", "2.13.0", up, maintenance)
    assert (paired.version, paired.how) == ("2.11.1", "maintenance")
    assert pair("torchaudio", "2.13.0", up, None).version is None


def test_default_build_from_the_cuda_runtime_pin() -> None:
    assert default_build(["nvidia-cuda-runtime-cu11 (==11.7.99) ; platform_system == 'Linux'"], "t") == "cu117"
    assert default_build(["cuda-toolkit[cudart,nvrtc]==13.2.2; platform_system == 'Linux'"], "t") == "cu132"
    with pytest.raises(Malformed, match="pins no CUDA runtime"):
        default_build(["filelock", "sympy>=1.13"], "torch 9.9.9")


def test_wheel_index_pages() -> None:
    text = page("cu129", [("2.8.0", ["3.10", "3.11"]), ("2.12.1", ["3.12"])])
    assert builds_on_page(text, "cu129", "here") == {"2.8.0", "2.12.1"}
    assert builds_on_page(text, "cu130", "here") == set()
    with pytest.raises(Malformed, match="not a PEP 503 HTML page"):
        builds_on_page('{"files": []}', "cu129", "here")


def test_metadata_of_a_wheel() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        wheel.writestr("torch-2.16.0.dist-info/METADATA", "Metadata-Version: 2.4\nName: torch\nRequires-Dist: a\n")
    text = read_wheel_metadata(buffer, "w.whl")  # type: ignore[arg-type]
    assert requires_dist(text) == ["a"]
    with pytest.raises(IndexFailed, match="not a readable wheel"):
        read_wheel_metadata(io.BytesIO(b"garbage" * 100), "w.whl")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a core metadata file"):
        requires_dist("<html>nope</html>")


def test_snapshot_paths_stay_inside_the_snapshot() -> None:
    assert snapshot_key(Request("pypi", "simple/torch/", accept="application/json")) == "pypi/simple/torch/index.json"
    assert snapshot_key(Request("pytorch", "cu126/torch/", accept="text/html")) == "pytorch/cu126/torch/index.html"
    with pytest.raises(IndexFailed, match="outside the snapshot"):
        snapshot_key(Request("pypi", "../../etc/passwd"))
    bases = {"pypi-files": "http://127.0.0.1:1/pypi-files"}
    assert split_url("https://files.pythonhosted.org/packages/a/b.whl", "https://pypi.org/simple/x/", bases) == (
        "pypi-files",
        "packages/a/b.whl",
    )
    with pytest.raises(IndexFailed, match="outside every configured index"):
        split_url("https://elsewhere.example/b.whl", "https://pypi.org/simple/x/", bases)
