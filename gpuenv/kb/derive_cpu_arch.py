"""Pure rules: the wheels PyTorch's index pages list for another CPU architecture in, torch_cpu_arch rows out.

The file names say which builds publish a release for the architecture (cu130/torch/ lists
torch-2.9.0+cu130-cp312-cp312-manylinux_2_28_aarch64.whl); they do not say which GPU code a build carries
(the build scripts' TORCH_CUDA_ARCH_LIST), nor what PyPI's plain wheel is there. Those are kept from the row
in use; a build new to the knowledge base takes the list of the newest earlier release with the same build,
marked unconfirmed. A wheel named without the build (torch-2.5.1-cp310-cp310-linux_aarch64.whl on the cu124
page) is ambiguous, as CPU builds are named the same: it keeps a build the row in use has and adds none.
A build whose page could not be read keeps its place in the row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from packaging.version import Version

from gpuenv.kb.derive import ArchListing, Derived
from gpuenv.kb.model import COMPANIONS


def torch_cpu_arch_rows(
    current: Iterable[Mapping[str, Any]],
    listing: ArchListing,
    torch_rows: Iterable[Mapping[str, Any]],
    cpu_arch: str,
    cite: str,
    checked: str,
) -> Derived:
    """One row per torch release (of the derived torch rows) for `cpu_arch`, in version order."""
    by_torch = {str(row["torch"]): row for row in current if row["cpu_arch"] == cpu_arch}
    out = Derived([], {})
    for release in sorted(torch_rows, key=lambda r: Version(str(r["version"]))):
        version = str(release["version"])
        old = by_torch.get(version)
        if old is None and not listing.torch.get(version):
            continue  # nothing known of the release on this architecture, and no wheel of it listed
        earlier = _earlier(version, by_torch, out.rows)
        row = _row(version, old or {}, listing, out, earlier, cpu_arch, cite)
        if row is None:
            continue
        row["checked"] = checked
        _companions(row, release, listing, old or {})
        out.rows.append(_ordered(row))
        out.field_sources[version] = {"torch": cite, "builds": cite, "companions_missing": cite}
    return out


def _earlier(version: str, current: Mapping[str, Mapping[str, Any]], derived: list[dict[str, Any]]) -> list[Any]:
    """The rows of the releases before `version`, newest first, each as derived here before as in the file in use
    (a build an earlier release lost on the index still tells its GPU code)."""
    rows = [row for row in (*derived, *current.values()) if Version(str(row["torch"])) < Version(version)]
    return sorted(rows, key=lambda row: Version(str(row["torch"])), reverse=True)


def _row(
    version: str,
    old: Mapping[str, Any],
    listing: ArchListing,
    out: Derived,
    earlier_rows: list[Any],
    cpu_arch: str,
    cite: str,
) -> dict[str, Any] | None:
    where = f"torch {version} ({cpu_arch})"
    old_arch: dict[str, str] = dict(old.get("builds", {}))
    listed = listing.torch.get(version, {})
    unread = [b for b in old_arch if b not in listing.read]
    builds = [b for b, named in listed.items() if named or b in old_arch] + unread
    for build in sorted(b for b, named in listed.items() if not named and b not in old_arch):
        out.notes.append(f"{where}: {build}'s page lists wheels without +{build} (named as CPU builds are); not taken")
    for gone in sorted(b for b in old_arch if b in listing.read and b not in listed):
        out.notes.append(f"{where}: {gone} lists no {cpu_arch} wheel of it any more; left out")
    unconfirmed = [u for u in old.get("unconfirmed", ()) if u.partition(":")[2] in ("", *builds)]
    arch: dict[str, str] = {}
    for build in sorted(set(builds), key=_build_key):
        if build in old_arch:
            arch[build] = old_arch[build]
            continue
        earlier = next((r for r in earlier_rows if build in r["builds"]), None)
        if earlier is None:
            out.notes.append(f"{where}: {build} is listed, but no GPU code is known for it; left out")
            continue
        arch[build] = earlier["builds"][build]
        unconfirmed.append(f"arch:{build}")
        out.notes.append(f"{where}: {build}'s GPU code carried over from {earlier['torch']} (unconfirmed)")
    plain = str(old.get("plain_build") or (earlier_rows[0]["plain_build"] if earlier_rows else "cpu"))
    if not old:
        unconfirmed.append("plain_build")
        out.notes.append(f"{where}: new on {cpu_arch}; PyPI's plain wheel taken as {plain} (unconfirmed)")
    if plain not in (*arch, "cpu"):
        out.notes.append(f"{where}: PyPI's plain wheel is {plain}, a build its pages do not list; left out")
        return None
    sources = [s for s in str(old.get("source", "")).split("; ") if s]
    if set(arch) - set(old_arch) or not old:
        sources.append(cite)
    row: dict[str, Any] = {**old, "torch": version, "cpu_arch": cpu_arch, "builds": arch, "plain_build": plain}
    row["source"] = "; ".join(dict.fromkeys(sources))
    row.pop("unconfirmed", None)
    if unconfirmed:
        row["unconfirmed"] = list(dict.fromkeys(unconfirmed))
    return row


def _companions(row: dict[str, Any], release: Mapping[str, Any], listing: ArchListing, old: Mapping[str, Any]) -> None:
    """Per build: the companions (torchvision, torchaudio) whose page lists no wheel of the paired release for
    the architecture; a companion page not read keeps what the row in use said."""
    kept: dict[str, list[str]] = dict(old.get("companions_missing", {}))
    missing: dict[str, list[str]] = {}
    for build in row["builds"]:
        for package in COMPANIONS:
            page = listing.companions.get(package, {}).get(build)
            if _lacks(package, release.get(package), page, kept.get(build, ())):
                missing.setdefault(build, []).append(package)
    row.pop("companions_missing", None)
    if missing:
        row["companions_missing"] = missing


def _lacks(package: str, paired: Any, page: set[str] | None, said: Iterable[str]) -> bool:
    """Whether the companion page lists no wheel of the paired release; a page not read: what the row said."""
    if page is None:
        return package in said
    return paired is not None and str(paired) not in page


def _build_key(build: str) -> int:
    return int("".join(c for c in build if c.isdigit()) or 0)


_ORDER = ("torch", "cpu_arch", "builds", "companions_missing", "plain_build", "source", "checked", "unconfirmed")


def _ordered(row: dict[str, Any]) -> dict[str, Any]:
    """The key order of the shipped file (its note last), so the output diffs cleanly against it."""
    return {**{k: row[k] for k in _ORDER if k in row}, **{k: v for k, v in row.items() if k not in _ORDER}}
