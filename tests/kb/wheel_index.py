"""PEP 503 pages of PyTorch's wheel index (download.pytorch.org/whl/BUILD/torch/, BUILD a CUDA or ROCm
build), as that index writes them. The index cannot be reached from the build machines, so the recorded
snapshot's pages are made by `pages()` from the builds the knowledge base documents (its `pytorch-matrix`
source); tests derive variants (a release added, a build gone) the same way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.version import Version

HEAD = "<!DOCTYPE html>\n<html>\n  <body>\n    <h1>Links for torch</h1>\n"
TAIL = "  </body>\n</html>\n"


def wheel_name(version: str, build: str, python: str) -> str:
    tag = "cp" + python.replace(".", "")
    platform = "manylinux_2_28_x86_64" if Version(version) >= Version("2.6") else "linux_x86_64"
    return f"torch-{version}+{build}-{tag}-{tag}-{platform}.whl"


def page(build: str, releases: Iterable[tuple[str, Iterable[str]]]) -> str:
    """One build's page: every (version, Python minors) given."""
    links = []
    for version, pythons in releases:
        minors = list(pythons)
        for python in minors:
            name = wheel_name(version, build, python)
            href = f"/whl/{build}/{name.replace('+', '%2B')}"
            links.append(f'    <a href="{href}" data-requires-python="&gt;={minors[0]}">{name}</a><br/>\n')
    return HEAD + "".join(links) + TAIL


def pages(
    torch_rows: Iterable[Mapping[str, object]], torch_rocm: Iterable[Mapping[str, object]] = ()
) -> dict[str, str]:
    """build -> page, for every build the rows name: the CUDA builds of the torch rows, and the ROCm builds
    of the torch_rocm rows (with the Python minors of their torch release)."""
    by_build: dict[str, list[tuple[str, list[str]]]] = {}
    pythons: dict[str, list[str]] = {}
    for row in torch_rows:
        pythons[str(row["version"])] = list(row["python"])  # type: ignore[call-overload]
        for build in row["builds"]:  # type: ignore[attr-defined]
            by_build.setdefault(build, []).append((str(row["version"]), pythons[str(row["version"])]))
    for row in torch_rocm:
        for build in row["builds"]:  # type: ignore[attr-defined]
            by_build.setdefault(build, []).append((str(row["torch"]), pythons[str(row["torch"])]))
    return {build: page(build, releases) for build, releases in by_build.items()}


def write_pages(
    root: Path, torch_rows: Iterable[Mapping[str, object]], torch_rocm: Iterable[Mapping[str, object]] = ()
) -> None:
    for build, text in pages(torch_rows, torch_rocm).items():
        folder = root / "pytorch" / build / "torch"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "index.html").write_text(text)
