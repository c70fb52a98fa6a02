"""Loading a knowledge base file: the bounded read, the schema check and the cross-table rules.

The facts live in data (gpuenv/data/compat.json, or a user's copy via --data / GPUENV_DATA), so a
new torch release is a data change. A shipped file that fails the check is gpuenv's fault (exit 3);
a user's is a bad request (exit 2). Every message names the table, row and field.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion

from gpuenv.errors import BadRequest, CannotRun
from gpuenv.files import read_text
from gpuenv.kb.model import (
    COMPANIONS,
    AmdGpu,
    AnsibleNames,
    Architecture,
    ArchList,
    CudaOnArch,
    CudaRelease,
    DriverBranch,
    Gpu,
    KnowledgeBase,
    OsInfo,
    PciDevice,
    Provenance,
    RocmRelease,
    SchemaError,
    TorchOnArch,
    TorchRelease,
    TorchRocm,
    V,
)
from gpuenv.resources import data_file
from gpuenv.schema import parse_json
from gpuenv.stack import PythonSource

SCHEMA = "gpuenv.compat/2"
_IMAGE = re.compile(r"[a-z0-9][a-z0-9./-]{0,100}:[A-Za-z0-9][A-Za-z0-9._-]{0,60}", re.ASCII)
_WORD = re.compile(r"[a-z][a-z0-9-]{0,31}", re.ASCII)
_GFX = re.compile(r"gfx[0-9a-f]{3,4}", re.ASCII)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")  # each row's `checked`, matched some 300 times a load
_PCI_ID = re.compile(r"[0-9a-f]{4}")
_BRANCH = re.compile(r"R\d{3}")
_ROCM_TABLES = ("rocm", "torch_rocm", "amd_gpus")  # optional: knowledge bases written before ROCm lack them


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
    "rocm": {"version": str, "build": str, "release": str, "os": list, "images": list},
    "torch_rocm": {"torch": str, "builds": dict},
    "torch_cpu_arch": {"torch": str, "cpu_arch": str, "builds": dict, "plain_build": str},
    "cuda_cpu_arch": {"cuda": str, "cpu_arch": str, "images": list, "cudnn_images": list},
    "amd_gpus": {"name": str, "gfx": str, "aliases": list, "pci_ids": list, "min_rocm": (str, type(None))},
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
    """Load and check a knowledge base: the shipped one (read once per process), or a user's copy (errors exit 2)."""
    return _shipped_kb() if path is None else _load(path, user_file=True)


@cache
def _shipped_kb() -> KnowledgeBase:
    return _load(data_file("compat.json"), user_file=False)


def _load(source: Path, *, user_file: bool) -> KnowledgeBase:
    try:
        raw = parse_json(read_text(source, "knowledge base", regular=True))  # capped, finite, bounded nesting
        return parse_kb(raw, origin=str(source) if user_file else "shipped")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, SchemaError) as exc:
        message = f"knowledge base {source} is not usable: {exc}"
        if user_file:
            raise BadRequest(message, hint="fix the file, or drop --data / GPUENV_DATA to use the shipped one") from exc
        raise CannotRun(message, hint="reinstall gpuenv") from exc


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
        if not _DATE.fullmatch(row["checked"]):
            raise SchemaError(f"{where}.checked is not a date (YYYY-MM-DD)")
    return rows


def _optional_rows(raw: dict[str, Any], table: str) -> list[dict[str, Any]]:
    return _check_rows(raw, table) if table in raw else []


def _prov(row: dict[str, Any]) -> Provenance:
    return Provenance(row["source"], row["checked"], tuple(row.get("unconfirmed", ())))


def parse_kb(raw: Any, *, origin: str = "shipped") -> KnowledgeBase:
    """Build a KnowledgeBase from decoded JSON, checking the schema and the cross-references."""
    if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
        raise SchemaError(f"not a gpuenv knowledge base (schema must be {SCHEMA!r})")
    if not isinstance(raw.get("wheel_index"), str) or "{build}" not in raw["wheel_index"]:
        raise SchemaError("'wheel_index' must be a URL template containing {build}")
    if not isinstance(raw.get("generated"), str) or not _DATE.fullmatch(raw["generated"]):
        raise SchemaError("'generated' must be the date the file was made (YYYY-MM-DD)")
    gpus = tuple(
        Gpu(
            r["name"],
            r["sm"],
            tuple(r["aliases"]),
            r["nvswitch_systems"],
            r.get("cpu_arch"),
            r.get("open_modules"),
            _optional_bool(r, "datacenter", f"gpus {r['name']}"),
            tuple(r.get("unconfirmed", ())),
        )
        for r in _check_rows(raw, "gpus")
    )
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
                    forward_compat=_branches(r, "forward_compat", f"cuda {r['version']}"),
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
            os=tuple(_os(r) for r in _check_rows(raw, "os")),
            wheel_index=raw["wheel_index"],
            generated=raw["generated"],
            sources=dict(raw.get("sources", {})),
            origin=origin,
            **_rocm_tables(raw),
            **_cpu_arch_tables(raw),
        )
        _check_references(kb)
        _check_cpu_arch_references(kb)
        _check_rocm_references(kb)
    except (KeyError, TypeError, IndexError, InvalidVersion, ValueError) as exc:
        raise SchemaError(str(exc) if isinstance(exc, SchemaError) else f"{type(exc).__name__}: {exc}") from exc
    return kb


def _optional_bool(row: dict[str, Any], key: str, where: str) -> bool | None:
    value = row.get(key)
    if value is not None and not isinstance(value, bool):
        raise SchemaError(f"{where}: {key} must be true or false")
    return value


def _branches(row: dict[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    """An optional list of driver branches ("R535"); None where the row does not have it (older files)."""
    value = row.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(b, str) and _BRANCH.fullmatch(b) for b in value):
        raise SchemaError(f"{where}: {key} must be a list of driver branches such as R535")
    return tuple(value)


def _rocm_tables(raw: dict[str, Any]) -> dict[str, Any]:
    """The ROCm releases, the ROCm builds of each torch release, and AMD's GPUs (each table optional)."""
    rocm, torch_rocm, amd_gpus = (_optional_rows(raw, table) for table in _ROCM_TABLES)
    return {
        "rocm": tuple(
            RocmRelease(r["version"], r["build"], r["release"], tuple(r["os"]), tuple(r["images"]), _prov(r))
            for r in rocm
        ),
        "torch_rocm": tuple(
            TorchRocm(r["torch"], {build: _gfx_list(text, r["torch"]) for build, text in r["builds"].items()}, _prov(r))
            for r in torch_rocm
        ),
        "amd_gpus": tuple(
            AmdGpu(r["name"], r["gfx"], tuple(r["aliases"]), tuple(r["pci_ids"]), r["min_rocm"], _prov(r))
            for r in amd_gpus
        ),
    }


def _cpu_arch_tables(raw: dict[str, Any]) -> dict[str, Any]:
    """The torch and CUDA rows as published for other CPU architectures (optional: older files lack them)."""
    return {
        "torch_cpu_arch": tuple(
            TorchOnArch(
                r["torch"],
                r["cpu_arch"],
                {build: ArchList.parse(text) for build, text in r["builds"].items()},
                r["plain_build"],
                _prov(r),
                _companions_missing(r),
            )
            for r in _optional_rows(raw, "torch_cpu_arch")
        ),
        "cuda_cpu_arch": tuple(
            CudaOnArch(r["cuda"], r["cpu_arch"], tuple(r["images"]), tuple(r["cudnn_images"]), _prov(r))
            for r in _optional_rows(raw, "cuda_cpu_arch")
        ),
    }


def _companions_missing(row: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """A torch_cpu_arch row's optional `companions_missing`: build -> the companions (torchvision, torchaudio)
    whose index page lists no wheel of the paired release for the architecture."""
    table = row.get("companions_missing", {})
    if not (isinstance(table, dict) and all(isinstance(v, list) and set(v) <= set(COMPANIONS) for v in table.values())):
        raise SchemaError(f"torch_cpu_arch {row['torch']}: companions_missing must map builds to {list(COMPANIONS)}")
    if not set(table) <= set(row["builds"]):
        raise SchemaError(f"torch_cpu_arch {row['torch']}: companions_missing names a build the row does not have")
    return {build: tuple(packages) for build, packages in table.items()}


def _check_cpu_arch_references(kb: KnowledgeBase) -> None:
    """Each architecture's rows name a known release, once, with known builds; a GPU's CPU is one the KB knows."""
    torch, cuda = {t.version for t in kb.torch}, {c.version for c in kb.cuda}
    seen: set[tuple[str, str]] = set()
    for t in kb.torch_cpu_arch:
        where = f"torch_cpu_arch {t.torch} {t.cpu_arch}"
        if t.torch not in torch or (t.torch, t.cpu_arch) in seen or t.cpu_arch == kb.rows_cpu_arch:
            raise SchemaError(f"{where}: names an unknown torch release, twice, or the torch rows' own architecture")
        seen.add((t.torch, t.cpu_arch))
        unknown = [b for b in t.arch if b not in kb.cuda_by_build]
        if unknown or t.plain_build not in (*t.arch, "cpu"):
            raise SchemaError(f"{where}: builds {unknown or t.plain_build} are not its CUDA builds or cpu")
    for c in kb.cuda_cpu_arch:
        if c.cuda not in cuda or not set(c.cudnn_images) <= set(c.images) <= set(kb.os_by_name):
            raise SchemaError(f"cuda_cpu_arch {c.cuda} {c.cpu_arch}: an unknown CUDA row or OS, or cuDNN alone")
    for g in kb.gpus:
        if g.cpu_arch is not None and g.cpu_arch not in kb.cpu_arches:
            raise SchemaError(f"GPU {g.name}: CPU architecture {g.cpu_arch} has no wheel facts in the knowledge base")


def _gfx_list(text: str, torch: str) -> tuple[str, ...]:
    """PYTORCH_ROCM_ARCH syntax: "gfx90a;gfx942"."""
    items = tuple(item.strip() for item in text.split(";") if item.strip())
    if not items or not all(_GFX.fullmatch(item) for item in items):
        raise SchemaError(f"torch_rocm {torch}: {text!r} is not a list of gfx targets (gfx90a;gfx942)")
    return items


def _os(row: dict[str, Any]) -> OsInfo:
    where = f"os {row['name']}"
    ansible = row.get("ansible")
    if ansible is not None and not (isinstance(ansible, dict) and set(ansible) == {"distribution", "os_family"}):
        raise SchemaError(f'{where}: \'ansible\' must be {{"distribution": ..., "os_family": ...}}')
    for key in ("codename", "build_tools_repo"):
        if row.get(key) is not None and not (isinstance(row[key], str) and _WORD.fullmatch(row[key])):
            raise SchemaError(f"{where}: {key} {row[key]!r} must be a lower-case word")
    return OsInfo(
        row["name"],
        row["family"],
        row["version"],
        row["package_manager"],
        tuple(row["roles"]),
        row["system_python"],
        {v: PythonSource(p["via"], tuple(p["packages"]), p["note"]) for v, p in row["python"].items()},
        ansible=None if ansible is None else AnsibleNames(str(ansible["distribution"]), str(ansible["os_family"])),
        codename=row.get("codename"),
        build_tools_repo=row.get("build_tools_repo"),
        image=_os_image(row, where),
    )


def _os_image(row: dict[str, Any], where: str) -> str | None:
    image = row.get("image")
    if image is not None and not (isinstance(image, str) and _IMAGE.fullmatch(image)):
        raise SchemaError(f"{where}: image {image!r} must be an image reference such as ubuntu:22.04")
    return image


def _pci_device(row: dict[str, Any], gpus: tuple[Gpu, ...]) -> PciDevice:
    if not _PCI_ID.fullmatch(row["device_id"]):
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
        _check_forward_compat(kb, c)
    for o in kb.os:
        if "host" in o.roles and o.ansible is None:
            raise SchemaError(f"os {o.name} is a host OS but has no 'ansible' names (distribution, os_family)")
    sms = {a.sm for a in kb.architectures}
    if len(kb.pci_by_id) != len(kb.pci_devices):
        raise SchemaError("pci_devices lists a device id twice")
    for g in kb.gpus:
        if g.sm not in sms:
            raise SchemaError(f"GPU {g.name} has compute capability {g.sm}, which no architecture row has")
    for b in kb.driver_branches:
        if not _BRANCH.fullmatch(b.branch):
            raise SchemaError(f"driver branch {b.branch} must look like R580")


def _check_forward_compat(kb: KnowledgeBase, cuda: CudaRelease) -> None:
    """Forward compatibility serves known branches older than the one the release bundles."""
    known = {b.branch for b in kb.driver_branches}
    bundled = int(cuda.bundled_driver.split(".")[0])
    for branch in cuda.forward_compat or ():
        if branch not in known or int(branch[1:]) >= bundled:
            raise SchemaError(f"cuda {cuda.version}: forward_compat {branch} is not a known branch below R{bundled}")


def _check_rocm_references(kb: KnowledgeBase) -> None:
    """Every ROCm build a torch release names is known, builds are rocm + version, GPUs name gfx targets."""
    torch_versions = {t.version for t in kb.torch}
    for r in kb.rocm:
        V(r.version), V(r.release)
        if r.build != "rocm" + r.version:
            raise SchemaError(f"rocm {r.version}: build must be rocm{r.version}")
        for name in r.images:
            if name not in kb.os_by_name:
                raise SchemaError(f"rocm {r.version} lists images for unknown OS {name}")
    for t in kb.torch_rocm:
        if t.torch not in torch_versions:
            raise SchemaError(f"torch_rocm names torch {t.torch}, which no torch row has")
        for build in t.arch:
            if build not in kb.rocm_by_build:
                raise SchemaError(f"torch_rocm {t.torch} names build {build}, which no rocm row has")
    for g in kb.amd_gpus:
        if not _GFX.fullmatch(g.gfx) or not all(_PCI_ID.fullmatch(d) for d in g.pci_ids):
            raise SchemaError(f"AMD GPU {g.name}: gfx {g.gfx!r} or a PCI device id is malformed")
        if g.min_rocm is not None:
            V(g.min_rocm)
