"""PEP 503 pages of PyTorch's wheel index (download.pytorch.org/whl/BUILD/torch/, BUILD a CUDA or ROCm
build, and BUILD/torchvision/, BUILD/torchaudio/), as that index writes them. The index cannot be reached
from the build machines, so the recorded snapshot's pages are made by `pages()` from the builds the
knowledge base documents (its `pytorch-matrix` source, and its torch_cpu_arch rows for the aarch64 wheels);
tests derive variants (a release added, a build gone) the same way.

The aarch64 file names follow the index's (quoted in the KB's `aarch64-index-evidence`): before 2.6 no
local version and linux_aarch64 (torch-2.5.1-cp310-cp310-linux_aarch64.whl on cu124/), 2.6 with it
(torch-2.6.0+cu126-cp312-cp312-linux_aarch64.whl), from 2.7 manylinux_2_28_aarch64; torchvision's and
torchaudio's aarch64 wheels carry no local version."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from packaging.version import Version

from gpuenv.kb.derive import COMPANIONS

HEAD = "<!DOCTYPE html>\n<html>\n  <body>\n    <h1>Links for {package}</h1>\n"
TAIL = "  </body>\n</html>\n"


def wheel_name(version: str, build: str | None, python: str, platform: str = "", package: str = "torch") -> str:
    """A wheel's file name as the index writes it (build None: no local version); the platform defaults to
    the x86_64 one of the release."""
    tag = "cp" + python.replace(".", "")
    platform = platform or ("manylinux_2_28_x86_64" if Version(version) >= Version("2.6") else "linux_x86_64")
    return f"{package}-{version}{'+' + build if build else ''}-{tag}-{tag}-{platform}.whl"


def aarch64_names(torch: str, build: str, pythons: Iterable[str], package: str, version: str) -> list[str]:
    """The aarch64 wheels of torch release `torch` (`version`: the package's paired release) on `build`'s page."""
    platform = "manylinux_2_28_aarch64" if Version(torch) >= Version("2.7") else "linux_aarch64"
    named = package == "torch" and Version(torch) >= Version("2.6")
    return [wheel_name(version, build if named else None, python, platform, package) for python in pythons]


def _link(build: str, name: str, minors: list[str]) -> str:
    href = f"/whl/{build}/{name.replace('+', '%2B')}"
    return f'    <a href="{href}" data-requires-python="&gt;={minors[0]}">{name}</a><br/>\n'


def page(
    build: str,
    releases: Iterable[tuple[str, Iterable[str]]],
    names: Iterable[tuple[str, str]] = (),
    package: str = "torch",
) -> str:
    """One build's page: the x86_64 wheels of every (version, Python minors) given, then the (file name, oldest
    Python) given."""
    links = []
    for version, pythons in releases:
        minors = list(pythons)
        links += [_link(build, wheel_name(version, build, python, package=package), minors) for python in minors]
    links += [_link(build, name, [oldest]) for name, oldest in names]
    return HEAD.format(package=package) + "".join(links) + TAIL


def pages(
    torch_rows: Iterable[Mapping[str, Any]],
    torch_rocm: Iterable[Mapping[str, Any]] = (),
    on_arch: Iterable[Mapping[str, Any]] = (),
) -> dict[str, str]:
    """BUILD/PACKAGE -> page: for the CUDA builds of the torch rows, torch's and its companions' pages (the
    aarch64 wheels of the torch_cpu_arch rows on them); for the ROCm builds of the torch_rocm rows, torch's
    (with the Python minors of their torch release)."""
    rows = {str(row["version"]): row for row in torch_rows}
    x86: dict[str, list[tuple[str, list[str]]]] = {}
    arm: dict[str, list[tuple[str, str]]] = {}
    for version, row in rows.items():
        paired = {"torch": version, **{p: row[p] for p in COMPANIONS if row.get(p)}}
        for build in row["builds"]:
            for package, release in paired.items():
                x86.setdefault(f"{build}/{package}", []).append((release, list(row["python"])))
    for row in torch_rocm:
        for build in row["builds"]:
            x86.setdefault(f"{build}/torch", []).append((str(row["torch"]), list(rows[str(row["torch"])]["python"])))
    for on in on_arch:
        row = rows[str(on["torch"])]
        paired = {"torch": str(on["torch"]), **{p: row[p] for p in COMPANIONS if row.get(p)}}
        for build in on["builds"]:
            for package, release in paired.items():
                if package not in on.get("companions_missing", {}).get(build, ()):
                    names = aarch64_names(str(on["torch"]), build, row["python"], package, release)
                    arm.setdefault(f"{build}/{package}", []).extend((n, row["python"][0]) for n in names)
    return {
        key: page(key.split("/")[0], x86.get(key, []), arm.get(key, []), key.split("/")[1])
        for key in dict.fromkeys([*x86, *arm])
    }


def write_pages(
    root: Path,
    torch_rows: Iterable[Mapping[str, Any]],
    torch_rocm: Iterable[Mapping[str, Any]] = (),
    on_arch: Iterable[Mapping[str, Any]] = (),
) -> None:
    for key, text in pages(torch_rows, torch_rocm, on_arch).items():
        folder = root / "pytorch" / key
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "index.html").write_text(text)
