"""Pure rules: the ROCm builds PyTorch's wheel index lists per torch release in, torch_rocm rows out.

The index says which builds exist (download.pytorch.org/whl/rocm6.4/torch/ lists 2.9.1+rocm6.4); it does
not say which GPU targets a build carries (PYTORCH_ROCM_ARCH). Those are kept from the row in use, and a
build new to the knowledge base takes the targets of the newest earlier release with the same build, else
of the newest earlier ROCm build, marked unconfirmed. A build whose page could not be read keeps its row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from packaging.version import Version

from gpuenv.kb.derive import Derived


def _rocm_key(build: str) -> Version:
    return Version(build.removeprefix("rocm"))


def torch_rocm_rows(
    current: Iterable[Mapping[str, Any]],
    on_index: Mapping[str, set[str]],
    read: set[str],
    versions: Iterable[str],
    cite: str,
    checked: str,
) -> Derived:
    """One row per torch release (of `versions`) with a ROCm build, in version order."""
    by_torch = {str(row["torch"]): row for row in current}
    out = Derived([], {})
    for version in sorted(versions, key=Version):
        old = by_torch.get(version, {})
        old_builds: dict[str, str] = dict(old.get("builds", {}))
        builds = on_index.get(version, set()) | {b for b in old_builds if b not in read}
        for gone in sorted(b for b in old_builds if b in read and b not in builds):
            out.notes.append(f"torch {version}+{gone}: no longer on PyTorch's wheel index; left out")
        row = _row(version, old, sorted(builds, key=_rocm_key), out, cite)
        if row is not None:
            row["checked"] = checked
            out.rows.append(row)
            out.field_sources[version] = {"torch": cite, "builds": cite}
    return out


def _row(version: str, old: Mapping[str, Any], builds: list[str], out: Derived, cite: str) -> dict[str, Any] | None:
    old_builds: dict[str, str] = dict(old.get("builds", {}))
    unconfirmed = [u for u in old.get("unconfirmed", ()) if u.partition(":")[2] in ("", *builds)]
    arch: dict[str, str] = {}
    for build in builds:
        if build in old_builds:
            arch[build] = old_builds[build]
            continue
        carried = _earlier_targets(out.rows, build)
        if carried is None:
            out.notes.append(f"torch {version}+{build}: no GPU targets known for it; left out")
            continue
        arch[build], source = carried
        unconfirmed.append(f"arch:{build}")
        out.notes.append(f"torch {version}+{build}: GPU targets carried over from {source} (unconfirmed)")
    if not arch:
        return None
    sources = [s for s in str(old.get("source", "")).split("; ") if s]
    if set(arch) - set(old_builds):
        sources.append(cite)
    row: dict[str, Any] = {"torch": version, "builds": arch, "source": "; ".join(dict.fromkeys(sources))}
    if unconfirmed:
        row["unconfirmed"] = list(dict.fromkeys(unconfirmed))
    return row


def _earlier_targets(rows: list[dict[str, Any]], build: str) -> tuple[str, str] | None:
    """The targets of the newest earlier release with this build, else of the newest earlier ROCm build."""
    for row in reversed(rows):
        if build in row["builds"]:
            return row["builds"][build], f"{row['torch']}+{build}"
    for row in reversed(rows):
        newest = max(row["builds"], key=_rocm_key)
        return row["builds"][newest], f"{row['torch']}+{newest}"
    return None
