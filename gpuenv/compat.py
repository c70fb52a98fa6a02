"""The compatibility knowledge base: loading, schema check, and the pure queries over it.

The facts live in data (gpuenv/data/compat.json, or a user's copy via --data / GPUENV_DATA), so a
new torch release is a data change. Every row carries `source` and `checked`; facts listed in a
row's `unconfirmed` are surfaced as warnings by whoever uses them. docs/knowledge-base.md describes
the data model and every source.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from gpuenv.errors import BadRequest, CannotRun
from gpuenv.files import read_text
from gpuenv.resources import data_file
from gpuenv.schema import parse_json
from gpuenv.stack import PythonSource

SCHEMA = "gpuenv.compat/2"
STALE_AFTER_DAYS = 90


@dataclass(frozen=True)
class Provenance:
    source: str
    checked: str
    unconfirmed: tuple[str, ...] = ()


@dataclass(frozen=True)
class ArchList:
    """The GPU code in one (torch release, CUDA build): SASS (cubins) per compute capability, and PTX."""

    sass: tuple[str, ...]  # ("7.5", "8.0", ...)
    ptx: tuple[str, ...]  # ("12.0",): PTX the driver can JIT for newer devices

    @classmethod
    def parse(cls, text: str) -> ArchList:
        """From TORCH_CUDA_ARCH_LIST syntax: "7.5;8.0;12.0+PTX"."""
        items = [item.strip() for item in text.split(";") if item.strip()]
        if not items:
            raise SchemaError("an arch list names no compute capability")
        sass = tuple(item.removesuffix("+PTX") for item in items)
        for sm in sass:
            if not re.fullmatch(r"\d{1,2}\.\d", sm):
                raise SchemaError(f"arch list {text!r}: {sm!r} is not a compute capability")
        return cls(sass, tuple(item.removesuffix("+PTX") for item in items if item.endswith("+PTX")))

    def __str__(self) -> str:
        return ";".join(sm + ("+PTX" if sm in self.ptx else "") for sm in self.sass)

    def span(self) -> str:
        """Human-readable: "sm_75…sm_120 (+PTX 12.0)"."""
        text = f"sm_{_sm_digits(self.sass[0])}…sm_{_sm_digits(self.sass[-1])}"
        return text + (f" (+PTX {', '.join(self.ptx)})" if self.ptx else "")


@dataclass(frozen=True)
class TorchRelease:
    version: str
    torchvision: str | None
    torchaudio: str | None
    builds: tuple[str, ...]
    default_build: str
    python: tuple[str, ...]  # CPython minors with a Linux x86_64 wheel on PyPI
    provenance: Provenance
    arch: dict[str, ArchList] = field(default_factory=dict)  # per build
    python_experimental: tuple[str, ...] = ()  # wheels exist, but not for the trio: never picked
    released: str | None = None

    def build_confirmed(self, build: str) -> bool:
        """The release's build list is settled and nothing about this build is disputed."""
        disputed = ("builds", f"build:{build}", f"arch:{build}")
        return not any(u in disputed for u in self.provenance.unconfirmed)


@dataclass(frozen=True)
class CudaRelease:
    version: str  # "11.7"
    build: str  # "cu117"
    toolkit: str  # "11.7.1"
    bundled_driver: str
    minor_compat_floor: str
    cudnn: str | None
    cudnn_tag: str  # "cudnn8" | "cudnn9" | "cudnn"
    images: tuple[str, ...]  # OS names with nvidia/cuda images
    eol: bool
    deleted_tags: tuple[str, ...]
    provenance: Provenance


@dataclass(frozen=True)
class Architecture:
    sm: str  # "9.0"
    family: str
    open_modules: str  # "unsupported" | "recommended" | "required"
    min_cuda: str | None  # first nvcc that compiles for it (a floor for building, not for running)
    provenance: Provenance


@dataclass(frozen=True)
class Gpu:
    name: str
    sm: str
    aliases: tuple[str, ...]
    nvswitch_systems: bool


@dataclass(frozen=True)
class PciDevice:
    device_id: str  # PCI device id under vendor 10de, lower-case hex: "20b0"
    name: str  # as pci.ids names it: "GA100 [A100 SXM4 40GB]"
    gpu: Gpu

    @property
    def sm(self) -> str:
        return self.gpu.sm


@dataclass(frozen=True)
class DriverBranch:
    branch: str  # "R580"
    lts: bool
    latest: str | None  # newest release known; None when none is confirmed
    kind: str = "production"  # "lts" | "production" | "new-feature"

    @property
    def major(self) -> int:
        return int(self.branch[1:])


@dataclass(frozen=True)
class OsInfo:
    name: str
    family: str
    version: str
    package_manager: str
    roles: tuple[str, ...]  # "image" and/or "host"
    system_python: str
    python: dict[str, PythonSource]


@dataclass(frozen=True)
class KnowledgeBase:
    torch: tuple[TorchRelease, ...]
    cuda: tuple[CudaRelease, ...]
    architectures: tuple[Architecture, ...]
    gpus: tuple[Gpu, ...]
    driver_branches: tuple[DriverBranch, ...]
    os: tuple[OsInfo, ...]
    wheel_index: str
    generated: str  # YYYY-MM-DD: the date the facts were gathered
    pci_devices: tuple[PciDevice, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)
    origin: str = "shipped"

    @cached_property
    def cuda_by_build(self) -> dict[str, CudaRelease]:
        return {c.build: c for c in self.cuda}

    @cached_property
    def os_by_name(self) -> dict[str, OsInfo]:
        return {o.name: o for o in self.os}

    def find_cuda(self, cuda: str) -> CudaRelease | None:
        """A CUDA release by minor ("11.7"), toolkit ("11.7.1") or build ("cu117")."""
        for row in self.cuda:
            if cuda in (row.version, row.toolkit, row.build):
                return row
        return None

    def arch(self, sm: str) -> Architecture | None:
        return next((a for a in self.architectures if a.sm == sm), None)

    def find_gpu(self, name: str) -> Gpu | None:
        key = _gpu_key(name)
        for gpu in self.gpus:
            if key in {_gpu_key(n) for n in (gpu.name, *gpu.aliases)}:
                return gpu
        return None

    def index_url(self, build: str) -> str:
        return self.wheel_index.format(build=build)

    @cached_property
    def pci_by_id(self) -> dict[str, PciDevice]:
        return {d.device_id: d for d in self.pci_devices}


def _gpu_key(name: str) -> str:
    key = re.sub(r"[\s_-]+", "", name.lower())
    return key.removeprefix("nvidia").removeprefix("geforce").removeprefix("tesla")


def V(text: str) -> Version:
    """A comparable version; driver versions like 535.104.05 parse too."""
    return Version(text)


# --- driver ↔ CUDA: the one rule, shared by resolve and verify --------------------------------


@dataclass(frozen=True)
class DriverCompat:
    ok: bool
    mode: Literal["native", "minor-version", "no"]
    message: str


def driver_runs_cuda(kb: KnowledgeBase, driver: str, cuda: str) -> DriverCompat:
    """Whether an NVIDIA driver runs code built with a CUDA version.

    native: the driver is at least the toolkit's bundled driver. minor-version: older, but at or
    above the minor-version-compatibility floor of that CUDA major (works, except code needing
    PTX JIT of newer PTX). A driver given as a branch only ("580") is compared by branch.
    """
    row = kb.find_cuda(cuda)
    if row is None:
        raise BadRequest(f"unknown CUDA version {cuda}", hint=f"known: {', '.join(c.version for c in kb.cuda)}")
    have = _driver_key(driver)
    if have >= _driver_key(row.bundled_driver, like=driver):
        message = f"driver {driver} ≥ {row.bundled_driver}, bundled with CUDA {row.toolkit}"
        return DriverCompat(True, "native", message)
    if have >= _driver_key(row.minor_compat_floor, like=driver):
        return DriverCompat(
            True,
            "minor-version",
            f"driver {driver} is older than CUDA {row.toolkit}'s bundled {row.bundled_driver} but at or above "
            f"the minor-version-compatibility floor {row.minor_compat_floor}: runs, except code that needs PTX JIT",
        )
    floor = row.minor_compat_floor
    message = f"driver {driver} is below {floor}, the lowest driver that runs CUDA {row.version}"
    return DriverCompat(False, "no", message)


def _driver_key(driver: str, like: str | None = None) -> tuple[int, ...]:
    """Driver version as a tuple; compared by branch only when `like` (or itself) is a bare branch."""
    parts = tuple(int(p) for p in driver.split("."))
    if like is not None and "." not in like:
        return parts[:1]
    return parts


def recommended_branch(kb: KnowledgeBase, cuda: CudaRelease) -> DriverBranch:
    """The newest LTS branch that runs the CUDA natively, else the lowest production branch that
    does (datacenter fleets avoid new-feature branches), else the lowest newer branch."""
    bundled_major = int(cuda.bundled_driver.split(".")[0])
    native = [b for b in kb.driver_branches if b.major >= bundled_major]
    lts = [b for b in native if b.lts]
    if lts:
        return max(lts, key=lambda b: b.major)
    if not native:
        raise BadRequest(f"no known driver branch runs CUDA {cuda.toolkit}", hint="update the knowledge base")
    production = [b for b in native if b.kind == "production"]
    return min(production or native, key=lambda b: b.major)


# --- GPU code ↔ device: the one rule ------------------------------------------------------------


def _sm_digits(sm: str) -> str:
    return sm.replace(".", "")


def _cc(sm: str) -> tuple[int, int]:
    major, minor = sm.split(".")
    return int(major), int(minor)


def cubin_runs_on(cubin: str, device: str) -> bool:
    """Whether SASS built for compute capability `cubin` runs on a `device` (both "X.Y").

    A cubin for X.Y runs on X.Z for Z >= Y (same major only): sm_89 runs sm_86 cubins, sm_103 runs
    sm_100 cubins, but sm_90 does not run sm_80 cubins.
    """
    (cmajor, cminor), (dmajor, dminor) = _cc(cubin), _cc(device)
    return cmajor == dmajor and dminor >= cminor


def ptx_runs_on(ptx: str, device: str) -> bool:
    """PTX for X.Y is JIT-compiled by the driver for any device of compute capability >= X.Y."""
    return _cc(device) >= _cc(ptx)


def gpu_code_for(arch: ArchList, device: str) -> Literal["sass", "ptx"] | None:
    """How a build's GPU code reaches a device: its own SASS, PTX JIT, or not at all (None)."""
    if any(cubin_runs_on(sm, device) for sm in arch.sass):
        return "sass"
    if any(ptx_runs_on(sm, device) for sm in arch.ptx):
        return "ptx"
    return None


# --- PCI ids, staleness ----------------------------------------------------------------------------


def gpu_by_pci_id(kb: KnowledgeBase, device_id: str) -> PciDevice | None:
    """The GPU a PCI device id names: "20b0", "0x20B0" or "10de:20b0" (NVIDIA's vendor id only)."""
    key = device_id.strip().lower().removeprefix("0x")
    vendor, _, device = key.rpartition(":")
    if vendor not in ("", "10de", "0x10de"):
        return None
    return kb.pci_by_id.get(device.removeprefix("0x"))


def kb_age_days(kb: KnowledgeBase, today: date) -> int:
    return (today - date.fromisoformat(kb.generated)).days


def kb_age_line(kb: KnowledgeBase, today: date) -> str:
    age = kb_age_days(kb, today)
    return f"knowledge base: {kb.origin}, generated {kb.generated} ({age} day{'' if age == 1 else 's'} old)"


def staleness_warning(kb: KnowledgeBase, today: date) -> str | None:
    """A warning once the knowledge base is older than STALE_AFTER_DAYS, else None."""
    age = kb_age_days(kb, today)
    if age <= STALE_AFTER_DAYS:
        return None
    return (
        f"the knowledge base was generated on {kb.generated}, {age} days ago (over {STALE_AFTER_DAYS}): "
        "newer torch, CUDA and driver releases are unknown to it; update gpuenv or give a newer file with --data"
    )


# --- loading and the schema check ------------------------------------------------------------

_REQUIRED: dict[str, dict[str, type | tuple[type, ...]]] = {
    "torch": {
        "version": str,
        "torchvision": (str, type(None)),
        "torchaudio": (str, type(None)),
        "builds": list,
        "default_build": str,
        "python": list,
        "arch": dict,
    },
    "cuda": {
        "version": str,
        "build": str,
        "toolkit": str,
        "bundled_driver": str,
        "minor_compat_floor": str,
        "cudnn": (str, type(None)),
        "cudnn_tag": str,
        "images": list,
        "eol": bool,
        "deleted_tags": list,
    },
    "architectures": {"sm": str, "family": str, "open_modules": str},
    "gpus": {"name": str, "sm": str, "aliases": list, "nvswitch_systems": bool},
    "pci_devices": {"device_id": str, "name": str, "gpu": str},
    "driver_branches": {"branch": str, "lts": bool, "latest": (str, type(None))},
    "os": {
        "name": str,
        "family": str,
        "version": str,
        "package_manager": str,
        "roles": list,
        "system_python": str,
        "python": dict,
    },
}


def load_kb(path: Path | None = None) -> KnowledgeBase:
    """Load and check a knowledge base: the shipped one, or a user's copy (errors exit 2)."""
    user_file = path is not None
    source = path if path is not None else data_file("compat.json")
    try:
        raw = parse_json(read_text(source, "knowledge base"))  # size-capped, finite numbers, bounded nesting
        return parse_kb(raw, origin=str(source) if user_file else "shipped")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, SchemaError) as exc:
        message = f"knowledge base {source} is not usable: {exc}"
        if user_file:
            raise BadRequest(message, hint="fix the file, or drop --data / GPUENV_DATA to use the shipped one") from exc
        raise CannotRun(message, hint="reinstall gpuenv") from exc


class SchemaError(ValueError):
    pass


def _check_rows(raw: dict[str, Any], table: str) -> list[dict[str, Any]]:
    rows = raw.get(table)
    if not isinstance(rows, list) or not rows:
        raise SchemaError(f"'{table}' must be a non-empty list")
    for i, row in enumerate(rows):
        where = f"{table}[{i}]"
        if not isinstance(row, dict):
            raise SchemaError(f"{where} is not an object")
        for key, kind in {**_REQUIRED[table], "source": str, "checked": str}.items():
            if key not in row:
                raise SchemaError(f"{where} lacks '{key}'")
            if not isinstance(row[key], kind):
                raise SchemaError(f"{where}.{key} has the wrong type")
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["checked"]):
            raise SchemaError(f"{where}.checked is not a date (YYYY-MM-DD)")
    return rows


def _prov(row: dict[str, Any]) -> Provenance:
    return Provenance(row["source"], row["checked"], tuple(row.get("unconfirmed", ())))


def parse_kb(raw: Any, *, origin: str = "shipped") -> KnowledgeBase:
    """Build a KnowledgeBase from decoded JSON, checking the schema and the cross-references."""
    if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
        raise SchemaError(f"not a gpuenv knowledge base (schema must be {SCHEMA!r})")
    if not isinstance(raw.get("wheel_index"), str) or "{build}" not in raw["wheel_index"]:
        raise SchemaError("'wheel_index' must be a URL template containing {build}")
    if not isinstance(raw.get("generated"), str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw["generated"]):
        raise SchemaError("'generated' must be the date the file was made (YYYY-MM-DD)")
    gpus = tuple(Gpu(r["name"], r["sm"], tuple(r["aliases"]), r["nvswitch_systems"]) for r in _check_rows(raw, "gpus"))
    try:
        kb = KnowledgeBase(
            torch=tuple(
                TorchRelease(
                    r["version"],
                    r["torchvision"],
                    r["torchaudio"],
                    tuple(r["builds"]),
                    r["default_build"],
                    tuple(r["python"]),
                    _prov(r),
                    arch={build: ArchList.parse(text) for build, text in r["arch"].items()},
                    python_experimental=tuple(r.get("python_experimental", ())),
                    released=r.get("released"),
                )
                for r in _check_rows(raw, "torch")
            ),
            cuda=tuple(
                CudaRelease(
                    r["version"],
                    r["build"],
                    r["toolkit"],
                    r["bundled_driver"],
                    r["minor_compat_floor"],
                    r["cudnn"],
                    r["cudnn_tag"],
                    tuple(r["images"]),
                    r["eol"],
                    tuple(r["deleted_tags"]),
                    _prov(r),
                )
                for r in _check_rows(raw, "cuda")
            ),
            architectures=tuple(
                Architecture(r["sm"], r["family"], r["open_modules"], r.get("min_cuda"), _prov(r))
                for r in _check_rows(raw, "architectures")
            ),
            gpus=gpus,
            pci_devices=tuple(_pci_device(r, gpus) for r in _check_rows(raw, "pci_devices")),
            driver_branches=tuple(
                DriverBranch(r["branch"], r["lts"], r["latest"], r.get("kind", "lts" if r["lts"] else "production"))
                for r in _check_rows(raw, "driver_branches")
            ),
            os=tuple(
                OsInfo(
                    r["name"],
                    r["family"],
                    r["version"],
                    r["package_manager"],
                    tuple(r["roles"]),
                    r["system_python"],
                    {v: PythonSource(p["via"], tuple(p["packages"]), p["note"]) for v, p in r["python"].items()},
                )
                for r in _check_rows(raw, "os")
            ),
            wheel_index=raw["wheel_index"],
            generated=raw["generated"],
            sources=dict(raw.get("sources", {})),
            origin=origin,
        )
        _check_references(kb)
    except (KeyError, TypeError, IndexError, InvalidVersion, ValueError) as exc:
        raise SchemaError(str(exc) if isinstance(exc, SchemaError) else f"{type(exc).__name__}: {exc}") from exc
    return kb


def _pci_device(row: dict[str, Any], gpus: tuple[Gpu, ...]) -> PciDevice:
    if not re.fullmatch(r"[0-9a-f]{4}", row["device_id"]):
        raise SchemaError(f"PCI device id {row['device_id']!r} must be 4 lower-case hex digits")
    gpu = next((g for g in gpus if g.name == row["gpu"]), None)
    if gpu is None:
        raise SchemaError(f"PCI device {row['device_id']} names GPU {row['gpu']!r}, which no gpus row has")
    return PciDevice(row["device_id"], row["name"], gpu)


def _check_references(kb: KnowledgeBase) -> None:
    """Cross-table rules: every build known, with its arch list; versions parse; branches well formed."""
    for t in kb.torch:
        V(t.version)
        for build in t.builds:
            if build not in kb.cuda_by_build:
                raise SchemaError(f"torch {t.version} names build {build}, which no cuda row has")
        if set(t.arch) != set(t.builds):
            raise SchemaError(f"torch {t.version}: 'arch' must give the GPU code of exactly its builds")
        if t.default_build not in t.builds:
            raise SchemaError(f"torch {t.version}: default_build {t.default_build} is not among its builds")
        if not set(t.python_experimental) <= set(t.python):
            raise SchemaError(f"torch {t.version}: python_experimental must be among its python versions")
    for c in kb.cuda:
        for v in (c.version, c.toolkit, c.bundled_driver, c.minor_compat_floor):
            V(v)
        if c.build != "cu" + c.version.replace(".", ""):
            raise SchemaError(f"cuda {c.version}: build must be cu{c.version.replace('.', '')}")
        for name in c.images:
            if name not in kb.os_by_name:
                raise SchemaError(f"cuda {c.version} lists images for unknown OS {name}")
    sms = {a.sm for a in kb.architectures}
    if len(kb.pci_by_id) != len(kb.pci_devices):
        raise SchemaError("pci_devices lists a device id twice")
    for g in kb.gpus:
        if g.sm not in sms:
            raise SchemaError(f"GPU {g.name} has compute capability {g.sm}, which no architecture row has")
    for b in kb.driver_branches:
        if not re.fullmatch(r"R\d{3}", b.branch):
            raise SchemaError(f"driver branch {b.branch} must look like R580")
