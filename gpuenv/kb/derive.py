"""Pure rules: upstream data (already fetched and decoded) in, torch rows out.

Nothing here does I/O. Upstream data that does not have the shape the rules read raises Malformed,
naming where it came from, so a refresh never merges half of an answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.parser import HeaderParser
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from gpuenv.errors import CannotRun
from gpuenv.kb.model import COMPANIONS
from gpuenv.types import CPU_ARCHES, CpuArch


class Malformed(CannotRun):
    """Upstream answered, but with data gpuenv cannot read."""


@dataclass(frozen=True)
class ArchListing:
    """What the index pages list for one CPU architecture."""

    torch: Mapping[str, Mapping[str, bool]]  # torch version -> build -> whether its file names carry +build
    read: frozenset[str]  # the builds whose torch page was read
    # package -> build whose companion page was read -> the versions it lists for the architecture
    companions: Mapping[str, Mapping[str, set[str]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Upstream:
    """What the indexes said, decoded: the inputs of the torch rows."""

    projects: Mapping[str, Mapping[str, Any]]  # package -> PyPI project JSON
    requires: Mapping[str, Mapping[str, list[str]]]  # package -> version -> Requires-Dist lines
    builds: Mapping[str, set[str]]  # torch version -> CUDA builds on PyTorch's wheel index
    cite: Mapping[str, str]  # index -> source key to cite ("pypi", "pypi-metadata", "pytorch-matrix", ...)
    urls: Mapping[str, str]  # what to name in the diff: "pypi:torch", "pytorch:cu126" -> URL
    rocm_builds: Mapping[str, set[str]] = field(default_factory=dict)  # torch version -> ROCm builds on the index
    rocm_read: frozenset[str] = frozenset()  # the ROCm builds whose index page was read
    cpu_arches: Mapping[str, ArchListing] = field(default_factory=dict)  # the other CPU architectures' wheels


@dataclass
class Derived:
    rows: list[dict[str, Any]]
    field_sources: dict[str, dict[str, str]]  # torch version -> field -> where its value came from
    notes: list[str] = field(default_factory=list)  # facts carried over or dropped, for the report


# --- reading the package index ------------------------------------------------------------------


def releases(project: Mapping[str, Any], where: str) -> dict[str, list[dict[str, Any]]]:
    """Final releases with at least one file: version -> files (PyPI project JSON `releases`)."""
    table = project.get("releases") if isinstance(project, Mapping) else None
    if not isinstance(table, dict):
        raise Malformed(f"{where} has no 'releases' table: not a package index project page")
    out: dict[str, list[dict[str, Any]]] = {}
    for version, files in table.items():
        if not isinstance(files, list) or not all(isinstance(f, dict) and "filename" in f for f in files):
            raise Malformed(f"{where}: release {version!r} is not a list of file objects")
        try:
            if Version(version).is_prerelease or not files:
                continue
        except InvalidVersion:
            continue  # the index keeps some legacy version strings; they name no release we use
        out[version] = files
    return out


def linux_cpython(package: str, files: Iterable[Mapping[str, Any]]) -> list[str]:
    """CPython minors ("3.10") with a manylinux x86_64 wheel, sorted."""
    found = set()
    for f in files:
        m = re.match(rf"{package}-[^-]+-cp(\d)(\d+)-cp\d+m?-manylinux.*x86_64\.whl$", str(f["filename"]))
        if m:
            found.add((int(m.group(1)), int(m.group(2))))
    return [f"{major}.{minor}" for major, minor in sorted(found)]


def first_upload(files: Iterable[Mapping[str, Any]], where: str) -> str:
    try:
        return min(str(f["upload_time_iso_8601"]) for f in files)[:10]
    except KeyError as exc:
        raise Malformed(f"{where}: a file has no upload_time_iso_8601") from exc


def all_yanked(files: Iterable[Mapping[str, Any]]) -> bool:
    return all(bool(f.get("yanked")) for f in files)


def requires_dist(metadata: str) -> list[str]:
    """The Requires-Dist lines of a METADATA file (RFC 822 headers)."""
    headers = HeaderParser().parsestr(metadata)
    if not headers.get("Name") or not headers.get("Metadata-Version"):
        raise ValueError("not a core metadata file (no Name or Metadata-Version)")
    return [str(line) for line in headers.get_all("Requires-Dist") or []]


def _torch_requirement(lines: Iterable[str], where: str) -> SpecifierSet | None:
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            raise Malformed(f"{where}: Requires-Dist {line!r} does not parse") from exc
        if req.name == "torch" and not (req.marker and "extra" in str(req.marker)):
            return req.specifier
    return None


def default_build(lines: Iterable[str], where: str) -> str:
    """The plain PyPI wheel's CUDA build: its nvidia-cuda-runtime-cu1X or cuda-toolkit pin ("cu128")."""
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            raise Malformed(f"{where}: Requires-Dist {line!r} does not parse") from exc
        if re.fullmatch(r"nvidia-cuda-runtime-cu1\d|cuda-toolkit", req.name):
            pins = [s.version for s in req.specifier if s.operator == "=="]
            if pins and re.match(r"\d+\.\d+", pins[0]):
                major, minor = pins[0].split(".")[:2]
                return f"cu{major}{minor}"
    raise Malformed(f"{where}: its METADATA pins no CUDA runtime (nvidia-cuda-runtime-cu1X or cuda-toolkit ==)")


# --- PyTorch's wheel index ------------------------------------------------------------------------

ROWS_CPU_ARCH: CpuArch = "x86_64"  # the CPU architecture the torch rows' builds are read for


@dataclass(frozen=True)
class Wheel:
    """A wheel a PEP 503 page of PyTorch's index lists, as its file name says."""

    version: str  # the public version: "2.9.0"
    local: str | None  # "cu130", "rocm6.4"; None: the name carries none (PyTorch's older aarch64 wheels)
    cpu_arches: frozenset[str]  # the Linux CPU architectures its platform tags name


def wheels_on_page(page: str, package: str, where: str) -> list[Wheel]:
    """The Linux CPython wheels of `package` a PEP 503 page lists (its links' text), by their file names'
    version and platform tags (manylinux_2_28_aarch64, manylinux2014_aarch64, linux_x86_64 ...)."""
    head = page.lstrip()[:200].lower()
    if not (head.startswith("<!doctype html") or head.startswith("<html")):
        raise Malformed(f"{where} is not a PEP 503 HTML page")
    found = []
    for name in re.findall(r">\s*([^<>\s]+\.whl)\s*<", page):
        try:
            project, version, _, tags = parse_wheel_filename(name)
        except (InvalidWheelFilename, InvalidVersion):
            continue  # a name no installer would take names no release either
        cpython = {t.platform for t in tags if t.interpreter.startswith("cp")}
        arches = frozenset(a for a in CPU_ARCHES for p in cpython if _linux_platform(p, a))
        if project == package and arches:
            found.append(Wheel(version.public, version.local, arches))
    return found


def _linux_platform(tag: str, cpu_arch: str) -> bool:
    return tag.startswith(("linux_", "manylinux")) and tag.endswith("_" + cpu_arch)


def builds_on_page(page: str, build: str, where: str) -> set[str]:
    """Torch versions with a Linux x86_64 wheel of `build` (cu126, rocm6.4) on a PEP 503 page of PyTorch's index."""
    return rows_versions(wheels_on_page(page, "torch", where), build)


def rows_versions(wheels: Iterable[Wheel], build: str) -> set[str]:
    """The versions with a wheel of `build` for the torch rows' CPU architecture."""
    return {w.version for w in wheels if w.local == build and ROWS_CPU_ARCH in w.cpu_arches}


def arch_versions(wheels: Iterable[Wheel], build: str, cpu_arch: str) -> dict[str, bool]:
    """version -> whether its name carries +build, for the wheels of `build`'s page for `cpu_arch` named with
    the build or with no local version (as PyTorch names its older aarch64 wheels, and CPU builds)."""
    found: dict[str, bool] = {}
    for w in wheels:
        if cpu_arch in w.cpu_arches and w.local in (build, None):
            found[w.version] = found.get(w.version, False) or w.local == build
    return found


# --- the pairing rule ------------------------------------------------------------------------------


def release_line(package: str, torch: str) -> str:
    """The companion's release line for a torch release: torchvision 0.(N+15) and torchaudio 2.N for
    torch 2.N; 0.14 and 0.13 for torch 1.13."""
    major, minor = (int(x) for x in torch.split(".")[:2])
    if package == "torchvision":
        return "0.14" if major == 1 else f"0.{minor + 15}"
    return "0.13" if major == 1 else f"{major}.{minor}"


@dataclass(frozen=True)
class Pairing:
    version: str | None
    how: str  # "pin", "line", "range" (the line, admitted by a range), "maintenance", "none"


def pair(package: str, torch: str, up: Upstream, maintenance: Mapping[str, Any] | None) -> Pairing:
    """The companion release for a torch release (docs/knowledge-base.md, the pairing rule)."""
    files = releases(up.projects[package], f"{package}'s project page")
    usable = sorted((v for v, fs in files.items() if not all_yanked(fs) and v in up.requires[package]), key=Version)
    specs = {v: _torch_requirement(up.requires[package][v], f"{package} {v}") for v in usable}
    pinned = [v for v in usable if _pins(specs[v], torch)]
    if pinned:
        return Pairing(pinned[-1], "pin")
    patch = torch.split(".")[2] if torch.count(".") == 2 else "0"
    line = f"{release_line(package, torch)}.{patch}"
    if line in specs and (specs[line] is None or Version(torch) in specs[line]):  # type: ignore[operator]
        return Pairing(line, "line" if specs[line] is None else "range")
    if maintenance and Version(torch) >= Version(str(maintenance["since"])):
        admitting = [v for v in usable if specs[v] is not None and Version(torch) in specs[v]]  # type: ignore[operator]
        if admitting:
            return Pairing(admitting[-1], "maintenance")
    return Pairing(None, "none")


def _pins(spec: SpecifierSet | None, torch: str) -> bool:
    if spec is None:
        return False
    pins = [s for s in spec if s.operator == "=="]
    try:
        return len(pins) == 1 and Version(pins[0].version) == Version(torch)
    except (InvalidVersion, InvalidSpecifier):
        return False


# --- the torch rows -------------------------------------------------------------------------------


def torch_rows(up: Upstream, overlay: Mapping[str, Any], known_builds: set[str], checked: str) -> Derived:
    """One row per torch release on the package index from the overlay's floor on, in version order."""
    conf = overlay["torch"]
    files = releases(up.projects["torch"], "torch's project page")
    floor = Version(str(conf["floor"]))
    versions = sorted((v for v in files if Version(v) >= floor and not all_yanked(files[v])), key=Version)
    out = Derived([], {})
    for version in versions:
        if not linux_cpython("torch", files[version]):
            out.notes.append(f"torch {version}: no manylinux x86_64 CPython wheel on the package index; left out")
            continue
        row = _torch_row(version, files[version], up, conf, known_builds, out)
        if row is not None:
            row["checked"] = checked
            out.rows.append(_ordered(row))
    return out


def _torch_row(
    version: str, files: list[dict[str, Any]], up: Upstream, conf: Mapping[str, Any], known: set[str], out: Derived
) -> dict[str, Any] | None:
    extra = conf.get("releases", {}).get(version, {})
    default = default_build(up.requires["torch"].get(version, ()), f"torch {version}")
    on_index = up.builds.get(version, set()) | {default}
    builds = sorted((b for b in on_index if b in known), key=lambda b: int(b[2:]))
    for dropped in sorted(on_index - known):
        out.notes.append(f"torch {version}: build {dropped} has no CUDA row in the knowledge base; left out")
    if default not in builds:
        out.notes.append(f"torch {version}: its plain wheel's build {default} has no CUDA row; the release is left out")
        return None
    row: dict[str, Any] = {"version": version, "builds": builds, "default_build": default}
    unconfirmed = [u for u in extra.get("unconfirmed", ()) if _still_applies(u, builds)]
    sources = [up.cite["pypi"], up.cite["pypi-files"]]
    sources.append(up.cite["pytorch"])
    row["arch"], arch_source = _arch(version, builds, conf, out, unconfirmed)
    sources += [arch_source, *extra.get("source", ())]
    row["python"] = linux_cpython("torch", files)
    row["released"] = first_upload(files, f"torch {version}")
    _companions(row, up, conf, unconfirmed, sources)
    row["source"] = "; ".join(dict.fromkeys(s for s in sources if s))
    if unconfirmed:
        row["unconfirmed"] = list(dict.fromkeys(unconfirmed))
    out.field_sources[version] = _field_sources(version, builds, up)
    return row


def _still_applies(item: str, builds: list[str]) -> bool:
    """An overlay doubt about one build ("build:cu129") lapses once the index no longer lists the build."""
    kind, _, build = item.partition(":")
    return kind not in ("build", "arch") or build in builds


def _arch(
    version: str, builds: list[str], conf: Mapping[str, Any], out: Derived, unconfirmed: list[str]
) -> tuple[dict[str, str], str]:
    """Each build's GPU code from the overlay's rules; a build no rule covers takes the newest earlier
    release's list for that build, marked unconfirmed and carried over (no wheel is read for it)."""
    arch: dict[str, str] = {}
    source = ""
    for build in builds:
        rule = next(
            (r for r in conf["arch"] if Version(version) in SpecifierSet(r["torch"]) and build in r["arch"]), None
        )
        if rule is not None:
            arch[build], source = rule["arch"][build], source or rule["source"]
            continue
        earlier = [r for r in out.rows if build in r["arch"]]
        if not earlier:
            raise Malformed(f"torch {version}+{build}: no arch rule and no earlier release of {build} to carry over")
        arch[build] = earlier[-1]["arch"][build]
        unconfirmed.append(f"arch:{build}")
        out.notes.append(f"torch {version}+{build}: GPU code carried over from {earlier[-1]['version']} (unconfirmed)")
    return arch, source


def _companions(
    row: dict[str, Any], up: Upstream, conf: Mapping[str, Any], unconfirmed: list[str], sources: list[str]
) -> None:
    version = row["version"]
    for package in COMPANIONS:
        maintenance = conf.get("maintenance", {}).get(package)
        paired = pair(package, version, up, maintenance)
        row[package] = paired.version
        if paired.how == "maintenance":
            unconfirmed.append(package)
        if maintenance and paired.version and Version(paired.version) >= Version(str(maintenance["since"])):
            sources.append(maintenance["source"])
        if paired.how == "range":
            row["pairing"] = conf["pairing_note"].format(package=package, version=paired.version)
    vision = row["torchvision"]
    if vision is None:
        row["python_experimental"] = []
        return
    vision_tags = linux_cpython("torchvision", releases(up.projects["torchvision"], "torchvision")[vision])
    row["python_experimental"] = [p for p in row["python"] if p not in vision_tags]


_ORDER = ("version", "torchvision", "torchaudio", "builds", "default_build", "arch", "python", "python_experimental")
_ORDER_TAIL = ("released", "source", "checked", "pairing", "unconfirmed")


def _ordered(row: dict[str, Any]) -> dict[str, Any]:
    """The key order of the shipped file, so the output diffs cleanly against it."""
    return {k: row[k] for k in (*_ORDER, *_ORDER_TAIL) if k in row}


def _field_sources(version: str, builds: list[str], up: Upstream) -> dict[str, str]:
    pypi, meta = up.urls.get("pypi:torch", "pypi"), up.urls.get(f"metadata:torch:{version}", "pypi-metadata")
    index = ", ".join(up.urls.get(f"pytorch:{b}", b) for b in builds)
    return {
        "version": pypi,
        "python": pypi,
        "released": pypi,
        "builds": index,
        "default_build": meta,
        "torchvision": up.urls.get("pypi:torchvision", "pypi"),
        "torchaudio": up.urls.get("pypi:torchaudio", "pypi"),
        "arch": "overlay (gpuenv/data/kb-overlay.json) or carried over",
    }
