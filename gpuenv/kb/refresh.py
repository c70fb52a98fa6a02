"""The `kb refresh` service: read the indexes (or a snapshot), derive the torch rows, merge them with the
hand-kept overlay and the knowledge base in use, check the result, diff it and write it.

The torch rows are derived whole, and so are their ROCm builds (torch_rocm: the builds the wheel index
lists; their GPU targets are kept from the file in use) and their builds for other CPU architectures
(torch_cpu_arch: the builds whose wheel file names carry the architecture; GPU code and the plain PyPI
build are kept from the file in use). The cuda rows' toolkit, bundled driver and deleted
tags are read anew
(NVIDIA's CUDA redist index, Docker Hub's nvidia/cuda tags). Tables and fields no index read here gives
(driver branches, GPUs, PCI ids, OS; cuDNN and images inside the cuda rows) are carried over from the file
in use and named in the output's `carried_over`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from gpuenv import files
from gpuenv.errors import BadRequest, CannotRun
from gpuenv.kb import SchemaError, parse_kb
from gpuenv.kb.derive import (
    ROWS_CPU_ARCH,
    ArchListing,
    Derived,
    Malformed,
    Upstream,
    Wheel,
    arch_versions,
    requires_dist,
    rows_versions,
    torch_rows,
    wheels_on_page,
)
from gpuenv.kb.derive_cpu_arch import torch_cpu_arch_rows
from gpuenv.kb.derive_cuda import (
    CARRIED_FIELDS,
    CudaDerived,
    CudaUpstream,
    bundled_driver,
    cuda_rows,
    driver_releases,
    driver_rows,
    redist_patches,
    tag_page,
)
from gpuenv.kb.derive_rocm import torch_rocm_rows
from gpuenv.kb.diff import Change, diff_rows
from gpuenv.kb.model import COMPANIONS
from gpuenv.kb.sources import (
    DEFAULT_BASES,
    HTML,
    SIMPLE_JSON,
    Fetcher,
    HttpFetcher,
    IndexFailed,
    RecordingFetcher,
    Request,
    SnapshotFetcher,
    split_url,
)
from gpuenv.resources import data_file
from gpuenv.schema import parse_json
from gpuenv.types import CPU_ARCHES

PACKAGES = ("torch", *COMPANIONS)
LIVE_CITES = {"pypi": "pypi", "pypi-files": "pypi-metadata", "pytorch": "pytorch-wheel-index"}
SNAPSHOT_INFO = "snapshot.json"
DERIVED_TABLES = ("torch", "cuda", "driver_branches", "torch_rocm", "torch_cpu_arch")
CARRIED_CPU_ARCH_FIELDS = ("plain_build",)  # PyPI's plain wheel per architecture: no index read here says it
DRIVERS_PATH = "releases.json"
TAGS_PATH = "v2/repositories/nvidia/cuda/tags"
MAX_TAG_PAGES = 200  # nvidia/cuda has a few thousand tags: 100 a page


@dataclass(frozen=True)
class RefreshRequest:
    output: Path
    current: Path | None = None  # the knowledge base in use (--data); None: the shipped one
    snapshot: Path | None = None  # --from DIR
    record: Path | None = None  # --record DIR
    bases: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_BASES))
    timeout: float = 30.0
    retries: int = 2
    today: date | None = None


@dataclass(frozen=True)
class RefreshResult:
    output: Path
    generated: str
    origin: str  # "network" or the snapshot directory
    changes: tuple[Change, ...]
    notes: tuple[str, ...]
    carried_over: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "output": str(self.output),
            "generated": self.generated,
            "from": self.origin,
            "changes": [c.__dict__ for c in self.changes],
            "notes": list(self.notes),
            "carried_over": list(self.carried_over),
        }


def refresh(request: RefreshRequest) -> RefreshResult:
    """Write a proposed knowledge base to request.output; nothing is written unless all of it checks."""
    _check(request)
    current = _current_kb(request.current)
    overlay = _load_json(data_file("kb-overlay.json"), "the overlay")
    fetcher, cite, checked = _fetcher(request)
    try:
        upstream = gather(fetcher, overlay, _known_builds(current), cite, _rocm_builds(current))
        cuda_upstream = gather_cuda(fetcher, current["cuda"])
        drivers_at = fetcher.url("nvidia-drivers", DRIVERS_PATH)
        branches = driver_releases(_json(fetcher, Request("nvidia-drivers", DRIVERS_PATH)), drivers_at)
    finally:
        if isinstance(fetcher, HttpFetcher):
            fetcher.close()
    derived = torch_rows(upstream, overlay, _known_builds(current), checked)
    versions = [str(row["version"]) for row in derived.rows]
    rocm = torch_rocm_rows(
        current.get("torch_rocm", ()), upstream.rocm_builds, set(upstream.rocm_read), versions, cite["pytorch"], checked
    )
    derived.notes.extend(rocm.notes)
    on_arches = _cpu_arch_rows(current.get("torch_cpu_arch", ()), upstream, derived.rows, cite["pytorch"], checked)
    derived.notes.extend(note for arch in on_arches.values() for note in arch.notes)
    cuda = cuda_rows(current["cuda"], cuda_upstream, checked)
    drivers = driver_rows(current["driver_branches"], branches, drivers_at, checked)
    proposed = merge(current, derived, cuda, drivers, overlay, checked, rocm=rocm, on_arches=on_arches)
    changes = diff_rows("torch", "version", current["torch"], derived.rows, derived.field_sources, _gone(upstream))
    changes += diff_rows("cuda", "version", current["cuda"], cuda.rows, cuda.field_sources, "not derived")
    old_branches = current["driver_branches"]
    changes += diff_rows("driver", "branch", old_branches, drivers.rows, drivers.field_sources, "not derived")
    old_rocm = current.get("torch_rocm", [])
    changes += diff_rows("torch_rocm", "torch", old_rocm, rocm.rows, rocm.field_sources, _gone(upstream))
    for arch, rows in on_arches.items():
        old_on_arch = [r for r in current.get("torch_cpu_arch", ()) if r["cpu_arch"] == arch]
        gone = f"no {arch} row derived: see the notes"
        changes += diff_rows("torch_cpu_arch", "torch", old_on_arch, rows.rows, rows.field_sources, gone)
    write_output(request.output, json.dumps(proposed, indent=1, ensure_ascii=False) + "\n")
    if request.record is not None:
        info = {"recorded": checked, "cite": LIVE_CITES, "bases": dict(request.bases)}
        write_output(request.record / SNAPSHOT_INFO, json.dumps(info, indent=1) + "\n")
    origin = str(request.snapshot) if request.snapshot else "network"
    return RefreshResult(
        request.output,
        checked,
        origin,
        tuple(changes),
        (*derived.notes, *cuda.notes, *drivers.notes),
        _carried(proposed),
    )


def merge(
    current: Mapping[str, Any],
    derived: Derived,
    cuda: CudaDerived,
    drivers: CudaDerived,
    overlay: Mapping[str, Any],
    checked: str,
    *,
    rocm: Derived | None = None,
    on_arches: Mapping[str, Derived] | None = None,
) -> dict[str, Any]:
    """The proposed file: the current one with derived tables replaced, checked like any loaded file."""
    proposed = dict(current)
    if rocm is not None and "torch_rocm" in current:  # a file written before ROCm gains no ROCm rows here
        proposed["torch_rocm"] = rocm.rows
    if on_arches is not None and "torch_cpu_arch" in current:  # nor one written before the CPU architecture
        proposed["torch_cpu_arch"] = [row for arch in on_arches.values() for row in arch.rows]
    proposed["generated"] = checked
    proposed["sources"] = {**current.get("sources", {}), **overlay.get("sources", {})}
    proposed["torch"] = derived.rows
    proposed["cuda"] = cuda.rows
    proposed["driver_branches"] = drivers.rows
    carried_fields = [f"cuda.{name}" for name in CARRIED_FIELDS]
    carried_fields += [f"torch_cpu_arch.{name}" for name in CARRIED_CPU_ARCH_FIELDS if "torch_cpu_arch" in current]
    proposed["carried_over"] = [t for t in _tables(current) if t not in DERIVED_TABLES] + carried_fields
    try:
        parse_kb(proposed, origin="kb refresh")
    except SchemaError as exc:
        raise CannotRun(f"the refreshed knowledge base does not check, nothing written: {exc}") from exc
    return proposed


def gather(
    fetcher: Fetcher,
    overlay: Mapping[str, Any],
    builds: set[str],
    cite: Mapping[str, str],
    rocm_builds: set[str] | None = None,
) -> Upstream:
    """Everything the torch rows are derived from: project pages, wheel METADATA, the wheel index's pages
    (of the CUDA builds, and of the ROCm builds the knowledge base knows)."""
    projects: dict[str, Any] = {}
    requires: dict[str, dict[str, list[str]]] = {}
    urls: dict[str, str] = {}
    floors = {"torch": overlay["torch"]["floor"], **overlay["torch"]["companion_floor"]}
    for package in PACKAGES:
        projects[package] = _json(fetcher, Request("pypi", f"pypi/{package}/json"))
        urls[f"pypi:{package}"] = fetcher.url("pypi", f"pypi/{package}/json")
        wheels = _wheels(fetcher, package, Version(floors[package]))
        requires[package] = {}
        for version, (index, path) in wheels.items():
            try:
                requires[package][version] = requires_dist(fetcher.wheel_metadata(index, path))
            except ValueError as exc:
                raise Malformed(f"{fetcher.url(index, path)}: its METADATA does not parse: {exc}") from exc
            urls[f"metadata:{package}:{version}"] = fetcher.url(index, path)
    cuda_pages = _index_pages(fetcher, "torch", builds, urls)
    rocm_pages = _index_pages(fetcher, "torch", rocm_builds or set(), urls)
    arches: dict[str, ArchListing] = {
        arch: _listing(fetcher, cuda_pages, arch, urls) for arch in CPU_ARCHES if arch != ROWS_CPU_ARCH
    }
    rocm_on_index = _on_index(rocm_pages)
    return Upstream(projects, requires, _on_index(cuda_pages), cite, urls, rocm_on_index, frozenset(rocm_pages), arches)


def _index_pages(fetcher: Fetcher, package: str, builds: set[str], urls: dict[str, str]) -> dict[str, list[Wheel]]:
    """build -> the wheels of `package` its wheel index page lists, for the builds whose page was read."""
    pages: dict[str, list[Wheel]] = {}
    for build in sorted(builds):
        path = f"{build}/{package}/"
        where = fetcher.url("pytorch", path)
        urls[f"pytorch:{build}" if package == "torch" else f"pytorch:{build}:{package}"] = where
        page = fetcher.get(Request("pytorch", path, accept=HTML, optional=True))
        if page is not None:
            pages[build] = wheels_on_page(_text(page, where), package, where)
    return pages


def _on_index(pages: Mapping[str, list[Wheel]]) -> dict[str, set[str]]:
    """torch version -> the builds whose page lists it for the torch rows' CPU architecture."""
    on_index: dict[str, set[str]] = {}
    for build, wheels in pages.items():
        for version in rows_versions(wheels, build):
            on_index.setdefault(version, set()).add(build)
    return on_index


def _listing(fetcher: Fetcher, pages: Mapping[str, list[Wheel]], cpu_arch: str, urls: dict[str, str]) -> ArchListing:
    """What the CUDA builds' torch pages, and their companions' pages, list for another CPU architecture."""
    torch: dict[str, dict[str, bool]] = {}
    for build, wheels in pages.items():
        for version, named in arch_versions(wheels, build, cpu_arch).items():
            torch.setdefault(version, {})[build] = named
    companions: dict[str, dict[str, set[str]]] = {}
    for package in COMPANIONS:
        read = _index_pages(fetcher, package, set(pages), urls)
        companions[package] = {build: set(arch_versions(wheels, build, cpu_arch)) for build, wheels in read.items()}
    return ArchListing(torch, frozenset(pages), companions)


def _cpu_arch_rows(
    current: Any, upstream: Upstream, torch: list[dict[str, Any]], cite: str, checked: str
) -> dict[str, Derived]:
    """The torch_cpu_arch rows of each CPU architecture other than the torch rows'."""
    return {
        arch: torch_cpu_arch_rows(current, listing, torch, arch, cite, checked)
        for arch, listing in upstream.cpu_arches.items()
    }


def gather_cuda(fetcher: Fetcher, rows: list[dict[str, Any]]) -> CudaUpstream:
    """The redist index's patches, the newest patch's manifest per minor of the rows, and every tag."""
    urls = {"redist": fetcher.url("cuda-redist", ""), "dockerhub": fetcher.url("dockerhub", TAGS_PATH)}
    listing = _text(fetcher.get(Request("cuda-redist", "", accept=HTML)), urls["redist"])
    patches = redist_patches(listing, urls["redist"])
    drivers = {}
    for minor in (str(row["version"]) for row in rows):
        if minor in patches:
            newest = patches[minor][-1]
            path = f"redistrib_{newest}.json"
            urls[f"redist:{newest}"] = fetcher.url("cuda-redist", path)
            drivers[newest] = bundled_driver(
                _json(fetcher, Request("cuda-redist", path)), newest, urls[f"redist:{newest}"]
            )
    return CudaUpstream(patches, drivers, frozenset(_tags(fetcher)), urls)


def _tags(fetcher: Fetcher) -> list[str]:
    """Every nvidia/cuda tag, following `next` only within the Docker Hub index, at most MAX_TAG_PAGES pages."""
    names: list[str] = []
    path: str | None = f"{TAGS_PATH}?page_size=100"
    bases = dict(getattr(fetcher, "bases", {}))
    for _ in range(MAX_TAG_PAGES):
        if path is None:
            return names
        where = fetcher.url("dockerhub", path)
        page_names, following = tag_page(_json(fetcher, Request("dockerhub", path)), where)
        names += page_names
        path = None if following is None else _same_index(following, where, bases)
    if path is None:
        return names
    raise IndexFailed(f"{fetcher.url('dockerhub', TAGS_PATH)} has more than {MAX_TAG_PAGES} pages of tags")


def _same_index(link: str, page_url: str, bases: dict[str, str]) -> str:
    index, path = split_url(link, page_url, bases)
    if index != "dockerhub" or not path.startswith(TAGS_PATH + "?"):
        raise IndexFailed(f"{page_url} links its next page outside the tag API: {link}")
    return path


def _wheels(fetcher: Fetcher, package: str, floor: Version) -> dict[str, tuple[str, str]]:
    """Per final version from the floor on: (index, path) of its smallest manylinux x86_64 wheel,
    from the Simple JSON API (PEP 691)."""
    page_path = f"simple/{package}/"
    page = _json(fetcher, Request("pypi", page_path, accept=SIMPLE_JSON))
    files = page.get("files") if isinstance(page, dict) else None
    if not isinstance(files, list):
        raise Malformed(f"{fetcher.url('pypi', page_path)} is not a PEP 691 project page (no 'files')")
    best: dict[str, tuple[int, str, str]] = {}
    for f in files:
        name = str(f.get("filename", "")) if isinstance(f, dict) else ""
        parts = name.split("-")
        if not (name.endswith("x86_64.whl") and "manylinux" in name and len(parts) >= 5) or f.get("yanked"):
            continue
        try:
            version = Version(parts[1])
        except InvalidVersion:
            continue
        if version.is_prerelease or version.local or version < floor:
            continue
        size = int(f.get("size") or 0)
        if str(version) not in best or (size, name) < best[str(version)][:2]:
            best[str(version)] = (size, name, str(f["url"]))
    page_url = fetcher.url("pypi", page_path)
    bases = dict(getattr(fetcher, "bases", {}))
    return {v: split_url(url, page_url, bases) for v, (_, _, url) in best.items()}


def _json(fetcher: Fetcher, request: Request) -> Any:
    where = fetcher.url(request.index, request.path)
    try:
        return json.loads(_text(fetcher.get(request), where))
    except json.JSONDecodeError as exc:
        raise Malformed(f"{where} did not answer JSON: {exc}") from exc


def _text(body: bytes | None, where: str) -> str:
    try:
        return (body or b"").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed(f"{where} answered bytes that are not UTF-8 text") from exc


def _fetcher(request: RefreshRequest) -> tuple[Fetcher, Mapping[str, str], str]:
    """The fetcher, what to cite for each index, and the date the facts are from."""
    today = (request.today or date.today()).isoformat()
    if request.snapshot is not None:
        info = snapshot_info(request.snapshot / SNAPSHOT_INFO)
        snapshot = SnapshotFetcher(request.snapshot, info["bases"])
        return snapshot, {**LIVE_CITES, **info["cite"]}, info["recorded"]
    fetcher: Fetcher = HttpFetcher(dict(request.bases), request.timeout, request.retries)
    if request.record is not None:
        fetcher = RecordingFetcher(fetcher, request.record)
    return fetcher, LIVE_CITES, today


def _known_builds(kb: Mapping[str, Any]) -> set[str]:
    return {str(row["build"]) for row in kb.get("cuda", [])}


def _rocm_builds(kb: Mapping[str, Any]) -> set[str]:
    return {str(row["build"]) for row in kb.get("rocm", [])}


def _tables(kb: Mapping[str, Any]) -> list[str]:
    return [k for k, v in kb.items() if isinstance(v, list) and k != "carried_over"]


def _carried(kb: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(kb.get("carried_over", ()))


def _gone(upstream: Upstream) -> str:
    return f"not on {upstream.urls.get('pypi:torch', 'the package index')} from the overlay's floor on"


def _check(request: RefreshRequest) -> None:
    if files.same_file(request.output, data_file("compat.json")):  # by inode: a symlink or a hard link too
        raise BadRequest("kb refresh never overwrites the shipped knowledge base", hint="write elsewhere with -o FILE")
    files.refuse_inputs({"--output": request.output}, [request.snapshot])
    if request.snapshot is not None and request.record is not None:
        raise BadRequest("--from and --record exclude each other", hint="record from the network, or read a snapshot")
    if request.snapshot is not None and dict(request.bases) != DEFAULT_BASES:
        raise BadRequest("index base URLs do not apply to --from DIR", hint="drop the --*-url options or --from")


def _load_json(path: Path, what: str, *, kind: str = "knowledge base") -> Any:
    """A JSON file read through the one input rule: a regular file, capped, finite numbers, bounded nesting."""
    text = files.read_text(path, what, kind=kind, regular=True, hint="check the path")
    try:
        return parse_json(text)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"{what} ({path}) is not readable JSON: {exc}", hint="check the path") from exc


def _current_kb(path: Path | None) -> dict[str, Any]:
    """The knowledge base in use (--data, else the shipped one), its schema checked before any row is read."""
    what = "the knowledge base in use"
    current = _load_json(path or data_file("compat.json"), what)
    try:
        parse_kb(current, origin=str(path or "shipped"))
    except SchemaError as exc:
        raise BadRequest(
            f"{what} ({path}) is not usable: {exc}", hint="give a gpuenv knowledge base with --data"
        ) from exc
    assert isinstance(current, dict)  # what parse_kb accepts
    return current


def snapshot_info(path: Path) -> dict[str, Any]:
    """A snapshot's snapshot.json: when it was recorded (YYYY-MM-DD), what to cite and the mirrors it was
    recorded from (each an object of strings); anything else is exit 2 naming the file and the field."""
    info = _load_json(path, "the snapshot's snapshot.json", kind="snapshot")
    if not isinstance(info, dict):
        raise BadRequest(f"the snapshot's {path} is not a JSON object", hint=_SNAPSHOT_HINT)
    recorded = info.get("recorded")
    if not isinstance(recorded, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", recorded):
        raise BadRequest(f"the snapshot's {path}: 'recorded' must be a date (YYYY-MM-DD)", hint=_SNAPSHOT_HINT)
    for key in ("cite", "bases"):
        table = info.get(key, {})
        if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
            raise BadRequest(f"the snapshot's {path}: '{key}' must be an object of strings", hint=_SNAPSHOT_HINT)
    return {"recorded": recorded, "cite": info.get("cite", {}), "bases": info.get("bases", {})}


_SNAPSHOT_HINT = "record the snapshot again with `gpuenv kb refresh --record DIR`"


def write_output(path: Path, text: str) -> None:
    """The one place refresh writes a file: atomically (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_output(path, text)
