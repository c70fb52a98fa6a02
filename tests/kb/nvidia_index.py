"""NVIDIA's CUDA redist index and Docker Hub's nvidia/cuda tag API, as those services write them. Neither
can be reached from the build machines, so the recorded snapshot's files are made here from the cuda rows
the knowledge base documents (their `cuda-runfiles` and `cuda-images` sources); tests derive variants
(a patch released, a tag deleted) the same way.

Formats: a redistrib manifest is a JSON object with release_label / release_product / release_date and one
object per component (`nvidia_driver`: name, license, version, per-platform {relative_path, sha256, md5,
size}), as in NVIDIA's redistrib_X.Y.Z.json; only the keys refresh reads and their names are kept (no
hashes, sizes or dates, which the knowledge base does not record). The redist directory is an HTML
listing linking redistrib_X.Y.Z.json. A Docker Hub tag page is {count, next, previous, results[]}, each
result {name, digest, last_updated, tag_status, images[]}; digests here are placeholders derived from the
tag name (the knowledge base keeps none and refresh does not read them). NVIDIA's driver releases.json
is an object of branch number -> {type ("lts branch", "production branch", "new feature branch"),
driver_info[] newest first, each {release_version, release_date, runfile_url{ARCH}}}, as a script of
Google's cuda_installer reads it; release dates are not kept (the knowledge base does not record them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

HUB = "https://hub.docker.com/v2/repositories/nvidia/cuda/tags"
PAGE_SIZE = 100


def patches(row: Mapping[str, Any]) -> list[str]:
    """Every patch of the row's minor up to its toolkit (X.Y.0 ... X.Y.Z)."""
    major, minor, last = str(row["toolkit"]).split(".")
    return [f"{major}.{minor}.{p}" for p in range(int(last) + 1)]


def tags(row: Mapping[str, Any]) -> list[str]:
    """The image tags of each patch whose tags are not deleted, per image OS."""
    flavours = ["base", "runtime", "devel", f"{row['cudnn_tag']}-runtime", f"{row['cudnn_tag']}-devel"]
    return [
        f"{patch}-{flavour}-{image}"
        for patch in patches(row)
        if patch not in row["deleted_tags"]
        for image in row["images"]
        for flavour in flavours
    ]


def manifest(toolkit: str, driver: str) -> dict[str, Any]:
    archive = f"nvidia_driver/linux-x86_64/nvidia_driver-linux-x86_64-{driver}-archive.tar.xz"
    return {
        "release_label": toolkit,
        "release_product": "cuda",
        "nvidia_driver": {
            "name": "NVIDIA Linux Driver",
            "license": "NVIDIA Driver",
            "license_path": "nvidia_driver/LICENSE.txt",
            "version": driver,
            "linux-x86_64": {"relative_path": archive},
        },
    }


def listing(names: Iterable[str]) -> str:
    links = "".join(f'<a href="{name}">{name}</a>\n' for name in names)
    head = "<html>\n<head><title>Index of /compute/cuda/redist/</title></head>\n<body>\n<pre>\n"
    return f"{head}{links}</pre>\n</body>\n</html>\n"


def tag_pages(names: list[str]) -> dict[str, dict[str, Any]]:
    """Snapshot key (below dockerhub/) -> page, PAGE_SIZE tags a page."""
    pages: dict[str, dict[str, Any]] = {}
    count = len(names)
    for start in range(0, count, PAGE_SIZE):
        number = start // PAGE_SIZE + 1
        following = f"{HUB}?page={number + 1}&page_size={PAGE_SIZE}" if start + PAGE_SIZE < count else None
        results = [_tag(name) for name in names[start : start + PAGE_SIZE]]
        key = "page_size=100" if number == 1 else f"page={number}&page_size={PAGE_SIZE}"
        pages[f"v2/repositories/nvidia/cuda/tags@{key}"] = {
            "count": count, "next": following, "previous": None, "results": results
        }  # fmt: skip
    return pages


def _tag(name: str) -> dict[str, Any]:
    digest = "sha256:" + hashlib.sha256(name.encode()).hexdigest()
    image = {"architecture": "amd64", "os": "linux", "digest": digest, "status": "active"}
    return {"name": name, "digest": digest, "last_updated": "2026-11-30T00:00:00Z", "tag_status": "active",
            "images": [image]}  # fmt: skip


TYPES = {"lts": "lts branch", "production": "production branch", "new-feature": "new feature branch"}


def driver_releases(branches: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """releases.json: branch number -> {type, driver_info[] newest first}, newest branch first."""
    out: dict[str, Any] = {}
    for row in sorted(branches, key=lambda r: -int(str(r["branch"])[1:])):
        latest = row["latest"]
        runfile = f"https://us.download.nvidia.com/tesla/{latest}/NVIDIA-Linux-x86_64-{latest}.run"
        info = [] if latest is None else [{"release_version": latest, "runfile_url": {"x86_64": runfile}}]
        out[str(row["branch"])[1:]] = {"type": TYPES[str(row["kind"])], "driver_info": info}
    return out


def write_drivers(root: Path, branches: Iterable[Mapping[str, Any]]) -> None:
    folder = root / "nvidia-drivers"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "releases.json").write_text(json.dumps(driver_releases(branches), indent=1) + "\n")


def write_indexes(root: Path, cuda_rows: list[Mapping[str, Any]], extra_tags: Iterable[str] = ()) -> None:
    """Write the redist listing, each minor's newest manifest and every tag page for these rows."""
    redist = root / "cuda-redist"
    redist.mkdir(parents=True, exist_ok=True)
    names = [f"redistrib_{p}.json" for row in cuda_rows for p in patches(row)]
    (redist / "index.html").write_text(listing(names))
    for row in cuda_rows:
        text = json.dumps(manifest(str(row["toolkit"]), str(row["bundled_driver"])), indent=2)
        (redist / f"redistrib_{row['toolkit']}.json").write_text(text + "\n")
    hub = root / "dockerhub"
    for old in hub.rglob("tags@*"):
        old.unlink()
    for key, page in tag_pages([t for row in cuda_rows for t in tags(row)] + list(extra_tags)).items():
        (hub / key).parent.mkdir(parents=True, exist_ok=True)
        (hub / key).write_text(json.dumps(page) + "\n")


if __name__ == "__main__":  # python -m tests.kb.nvidia_index: rebuild the snapshot's NVIDIA and Docker Hub part
    from gpuenv.resources import data_file

    shipped = json.loads(data_file("compat.json").read_text())
    snapshot = Path(__file__).resolve().parent.parent / "data" / "kb-snapshot"
    write_indexes(snapshot, shipped["cuda"])
    write_drivers(snapshot, shipped["driver_branches"])
