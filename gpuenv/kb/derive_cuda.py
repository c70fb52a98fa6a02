"""Pure rules for the cuda rows: NVIDIA's CUDA redist index and Docker Hub's nvidia/cuda tags in, the
derivable fields of each row out (toolkit, bundled_driver, deleted_tags; eol when every tag is gone).

Nothing here does I/O; data without the shape the rules read raises Malformed, naming where it came from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuenv.kb.derive import Malformed

# Fields of a cuda row no index read here gives: carried over from the file in use.
CARRIED_FIELDS = ("minor_compat_floor", "cudnn", "cudnn_tag", "images", "eol")  # eol: set when every tag is gone
_MANIFEST = re.compile(r"""href=["'](?:[^"']*/)?redistrib_(\d+)\.(\d+)\.(\d+)\.json["']""")
_RUNFILE = re.compile(r"https://developer\.download\.nvidia\.com/compute/cuda/[^;\s]*_linux\.run")


@dataclass(frozen=True)
class CudaUpstream:
    patches: Mapping[str, list[str]]  # minor "12.6" -> its toolkit patches on the redist index, in order
    drivers: Mapping[str, str]  # newest patch "12.6.3" -> the driver its redistrib manifest bundles
    tags: frozenset[str]  # every nvidia/cuda tag on Docker Hub
    urls: Mapping[str, str]  # "redist", "redist:12.6.3", "dockerhub" -> URL, to name in the diff


@dataclass
class CudaDerived:
    rows: list[dict[str, Any]]
    field_sources: dict[str, dict[str, str]]
    notes: list[str] = field(default_factory=list)


def redist_patches(listing: str, where: str) -> dict[str, list[str]]:
    """minor -> its patches, from the HTML directory listing of .../compute/cuda/redist/."""
    if "<html" not in listing[:1000].lower():
        raise Malformed(f"{where} is not an HTML directory listing")
    found: dict[str, set[tuple[int, int, int]]] = {}
    for m in _MANIFEST.finditer(listing):
        major, minor, patch = (int(x) for x in m.groups())
        found.setdefault(f"{major}.{minor}", set()).add((major, minor, patch))
    if not found:
        raise Malformed(f"{where} links no redistrib_X.Y.Z.json manifest")
    return {k: [".".join(map(str, v)) for v in sorted(vs)] for k, vs in found.items()}


def bundled_driver(manifest: Any, patch: str, where: str) -> str:
    """The driver a toolkit patch bundles: its redistrib manifest's nvidia_driver.version."""
    if not isinstance(manifest, dict) or manifest.get("release_label") != patch:
        raise Malformed(f"{where} is not the redistrib manifest of CUDA {patch} (release_label differs)")
    driver = manifest.get("nvidia_driver")
    version = driver.get("version") if isinstance(driver, dict) else None
    if not isinstance(version, str) or not re.fullmatch(r"\d+\.\d+(\.\d+)?", version):
        raise Malformed(f"{where} names no nvidia_driver version")
    return version


def tag_page(page: Any, where: str) -> tuple[list[str], str | None]:
    """Tag names of one page of Docker Hub's tag API, and its `next` link (None on the last page)."""
    results = page.get("results") if isinstance(page, dict) else None
    following = page.get("next") if isinstance(page, dict) else None
    if not isinstance(results, list) or not all(
        isinstance(r, dict) and isinstance(r.get("name"), str) for r in results
    ):
        raise Malformed(f"{where} is not a Docker Hub tag page (no results[] with names)")
    if following is not None and not isinstance(following, str):
        raise Malformed(f"{where}: its 'next' is not a link")
    return [str(r["name"]) for r in results], following or None


def cuda_rows(current: list[dict[str, Any]], up: CudaUpstream, checked: str) -> CudaDerived:
    """Each cuda row of the file in use, its derivable fields read anew; the rest carried over."""
    out = CudaDerived([], {})
    for row in current:
        patches = up.patches.get(str(row["version"]))
        if not patches:
            out.notes.append(f"cuda {row['version']}: not on the CUDA redist index; row carried over unchanged")
            out.rows.append(dict(row))
            continue
        out.rows.append(_cuda_row(row, patches, up, checked))
        out.field_sources[str(row["version"])] = _field_sources(patches[-1], up)
    known = {str(r["version"]) for r in current}
    for minor in sorted(set(up.patches) - known, key=lambda v: tuple(map(int, v.split(".")))):
        out.notes.append(f"cuda {minor}: on the CUDA redist index but has no cuda row (no torch build); left out")
    return out


def _cuda_row(row: Mapping[str, Any], patches: list[str], up: CudaUpstream, checked: str) -> dict[str, Any]:
    toolkit = patches[-1]
    driver = up.drivers[toolkit]
    deleted = [p for p in patches if not any(tag.startswith(p + "-") for tag in up.tags)]
    runfile = f"https://developer.download.nvidia.com/compute/cuda/{toolkit}/local_installers/cuda_{toolkit}_{driver}_linux.run"
    new = dict(row)  # the file's key order, so the output diffs cleanly
    new.update(toolkit=toolkit, bundled_driver=driver, deleted_tags=deleted, checked=checked)
    new["eol"] = bool(row["eol"]) or len(deleted) == len(patches)  # EOL itself is NVIDIA's word, carried over
    new["source"] = _RUNFILE.sub(runfile, str(row["source"])) if _RUNFILE.search(str(row["source"])) else row["source"]
    return new


def _field_sources(toolkit: str, up: CudaUpstream) -> dict[str, str]:
    hub = up.urls.get("dockerhub", "Docker Hub")
    return {
        "toolkit": up.urls.get("redist", "the CUDA redist index"),
        "bundled_driver": up.urls.get(f"redist:{toolkit}", "the redistrib manifest"),
        "source": up.urls.get(f"redist:{toolkit}", "the redistrib manifest"),
        "deleted_tags": hub,
        "eol": f"{hub} (every tag of the minor gone)",
    }


# --- NVIDIA's datacenter driver releases (docs.nvidia.com/datacenter/tesla/drivers/releases.json) -------

BRANCH_KINDS = {"lts branch": "lts", "production branch": "production", "new feature branch": "new-feature"}


@dataclass(frozen=True)
class Branch:
    kind: str
    latest: str | None


def driver_releases(data: Any, where: str) -> dict[str, Branch]:
    """ "R580" -> its kind and newest release, from releases.json: branch number -> {type, driver_info[]},
    driver_info newest first, each with release_version."""
    if not isinstance(data, dict) or not data:
        raise Malformed(f"{where} is not NVIDIA's driver release list (an object of branches)")
    out = {}
    for number, info in data.items():
        kind = BRANCH_KINDS.get(str(info.get("type")).lower()) if isinstance(info, dict) else None
        releases = info.get("driver_info") if isinstance(info, dict) else None
        if not re.fullmatch(r"\d+", str(number)) or kind is None or not isinstance(releases, list):
            raise Malformed(f"{where}: branch {number!r} has no known type or no driver_info list")
        versions = [r.get("release_version") for r in releases if isinstance(r, dict)]
        if not all(isinstance(v, str) for v in versions) or len(versions) != len(releases):
            raise Malformed(f"{where}: branch {number!r} lists a release without release_version")
        out[f"R{number}"] = Branch(kind, versions[0] if versions else None)
    return out


def driver_rows(current: list[dict[str, Any]], branches: Mapping[str, Branch], where: str, checked: str) -> CudaDerived:
    """The file's branches with kind and newest release read anew; branches new upstream added after them."""
    out = CudaDerived([], {})
    sources = {"kind": where, "lts": where, "latest": where, "branch": where}
    for row in current:
        branch = branches.get(str(row["branch"]))
        if branch is None:
            out.notes.append(f"driver {row['branch']}: not in {where}; row carried over unchanged")
            out.rows.append(dict(row))
            continue
        out.rows.append({**row, "lts": branch.kind == "lts", "kind": branch.kind, "latest": branch.latest,
                         "checked": checked})  # fmt: skip
        out.field_sources[str(row["branch"])] = sources
    known = {str(r["branch"]) for r in current}
    for name in sorted(set(branches) - known, key=lambda b: int(b[1:])):
        branch = branches[name]
        out.rows.append({"branch": name, "lts": branch.kind == "lts", "kind": branch.kind, "latest": branch.latest,
                         "source": "nvidia-driver-releases", "checked": checked})  # fmt: skip
        out.field_sources[name] = sources
    return out
