"""Record the package index's part of tests/data/kb-snapshot/ for real, trimmed to what refresh reads.

    python -m tests.kb.record            # needs the network to pypi.org and files.pythonhosted.org
    python -m tests.kb.record --pytorch  # only the PyTorch wheel index pages, made from the KB (offline)

PyTorch's wheel index is not reachable from the build machines: its pages in the snapshot are made from
the knowledge base's documented builds (tests/kb/wheel_index.py) and cited as `pytorch-matrix`.
Trimming keeps the upstream structure: project JSON keeps the fields refresh reads, Simple JSON keeps
the manylinux x86_64 files, METADATA keeps its headers (the long description is dropped).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from datetime import date
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from gpuenv.kb.refresh import SNAPSHOT_INFO, RefreshRequest, refresh
from gpuenv.kb.sources import DEFAULT_BASES
from gpuenv.resources import data_file
from tests.kb.server import serving
from tests.kb.wheel_index import write_pages

SNAPSHOT = Path(__file__).resolve().parent.parent / "data" / "kb-snapshot"
FILE_KEYS = ("filename", "packagetype", "python_version", "requires_python", "size", "upload_time_iso_8601")


def _at_least(version: str, floor: Version) -> bool:
    try:
        return Version(version) >= floor
    except InvalidVersion:
        return False


def trim_project(page: dict[str, Any], floor: Version) -> dict[str, Any]:
    info = {k: page["info"][k] for k in ("name", "requires_dist", "requires_python", "version")}
    releases = {
        v: [{**{k: f[k] for k in FILE_KEYS}, "yanked": f["yanked"], "yanked_reason": f["yanked_reason"]} for f in files]
        for v, files in page["releases"].items()
        if _at_least(v, floor)
    }
    return {"info": info, "last_serial": page["last_serial"], "releases": releases}


def trim_simple(page: dict[str, Any], floor: Version) -> dict[str, Any]:
    def keep(f: dict[str, Any]) -> bool:
        name = f["filename"]
        return "manylinux" in name and name.endswith("x86_64.whl") and _at_least(name.split("-")[1], floor)

    versions = [v for v in page["versions"] if _at_least(v, floor)]
    return {**page, "versions": versions, "files": [f for f in page["files"] if keep(f)]}


def trim_metadata(text: str) -> str:
    return text.split("\n\n", 1)[0].rstrip("\n") + "\n"


def write_pytorch_pages(out: Path, kb: dict[str, Any]) -> None:
    """The snapshot's PyTorch wheel index pages, made anew from the knowledge base (no network needed)."""
    shutil.rmtree(out / "pytorch", ignore_errors=True)
    write_pages(out, kb["torch"], kb.get("torch_rocm", ()), kb.get("torch_cpu_arch", ()))


def record(out: Path) -> None:
    kb = json.loads(data_file("compat.json").read_text())
    floors = {"torch": "1.13.0", "torchvision": "0.14.0", "torchaudio": "0.13.0"}
    with tempfile.TemporaryDirectory() as scratch:
        raw, pages = Path(scratch) / "raw", Path(scratch) / "pages"
        write_pages(pages, kb["torch"], kb.get("torch_rocm", ()), kb.get("torch_cpu_arch", ()))
        with serving(pages) as server:
            bases = {**DEFAULT_BASES, "pytorch": server.bases()["pytorch"]}
            refresh(RefreshRequest(output=Path(scratch) / "kb.json", record=raw, bases=bases, timeout=60))
        for package, floor in floors.items():
            for kind, trim in (("pypi/{}/json", trim_project), ("simple/{}/index.json", trim_simple)):
                file = raw / "pypi" / kind.format(package)
                file.write_text(json.dumps(trim(json.loads(file.read_text()), Version(floor)), indent=1) + "\n")
        for file in raw.rglob("*.METADATA"):
            file.write_text(trim_metadata(file.read_text()))
        write_pytorch_pages(raw, kb)
        info = {"recorded": date.today().isoformat(), "cite": {"pytorch": "pytorch-matrix"}, "note": __doc__}
        (raw / SNAPSHOT_INFO).write_text(json.dumps(info, indent=1) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(raw, out)


if __name__ == "__main__":
    pytorch_only = "--pytorch" in sys.argv[1:]  # remake the wheel index pages alone, offline
    where = next((Path(a) for a in sys.argv[1:] if a != "--pytorch"), SNAPSHOT)
    if pytorch_only:
        write_pytorch_pages(where, json.loads(data_file("compat.json").read_text()))
    else:
        record(where)
