"""Installed packages' versions, read from their metadata files as importlib.metadata finds them.

importlib.metadata costs a start-up some 10 ms (its import pulls in email's parser and zip support,
and each lookup builds a Distribution). `gpuenv info` wants five version strings, so this reads them
the way importlib.metadata does for a directory on sys.path: the first `<name>-<version>.dist-info`
or `.egg-info` entry whose name, normalized, is the package's (the first sys.path entry wins), and
the `Version:` header of its METADATA (or PKG-INFO). Regular and editable installs (PEP 660's
dist-info in site-packages, or a `setup.py develop` checkout's egg-info on sys.path) are both found.
Zip files and unpacked .egg directories on sys.path are not searched.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from functools import cache
from typing import NamedTuple

_SUFFIXES = (".dist-info", ".egg-info")
_METADATA_FILES = ("METADATA", "PKG-INFO")


def installed_version(distribution: str, path: Iterable[str] | None = None) -> str | None:
    """The installed version of a package (None: not installed); nothing is imported."""
    wanted = normalized(distribution)
    for entry in sys.path if path is None else path:
        found = _metadata_dirs(os.path.abspath(entry or ".")).get(wanted)
        if found is not None:
            return _version(found)
    return None


class EntryPoint(NamedTuple):
    name: str
    value: str  # "module:attribute"
    distribution: str
    version: str | None


def entry_points(group: str, path: Iterable[str] | None = None) -> list[EntryPoint]:
    """Every entry point in `group`, from each installed distribution's entry_points.txt (the first
    distribution of a name on sys.path, as importlib.metadata takes it); nothing is imported."""
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for entry in sys.path if path is None else path:
        for name, meta in _metadata_dirs(os.path.abspath(entry or ".")).items():
            if name in seen:
                continue
            seen.add(name)
            for key, value in _group(os.path.join(meta, "entry_points.txt"), group):
                distribution = os.path.basename(meta).rpartition(".")[0].partition("-")[0]
                found.append(EntryPoint(key, value, distribution, _version(meta)))
    return found


def _group(file: str, group: str) -> list[tuple[str, str]]:
    """(name, value) of each entry in one section of an entry_points.txt (an INI file); none when absent."""
    try:
        with open(file, encoding="utf-8", errors="replace") as lines:
            text = lines.read()
    except OSError:  # most distributions have none
        return []
    pairs, inside = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            inside = stripped == f"[{group}]"
        elif inside and "=" in stripped and not stripped.startswith(("#", ";")):
            key, _, value = stripped.partition("=")
            pairs.append((key.strip(), value.partition("[")[0].strip()))  # "mod:attr [extra]": the extra is pip's
    return pairs


def normalized(name: str) -> str:
    """A distribution name as importlib.metadata compares them: runs of -_. as one _, lower case."""
    return re.sub(r"[-_.]+", "_", name).lower()


@cache
def _metadata_dirs(directory: str) -> dict[str, str]:
    """Each distribution's first metadata entry in one sys.path directory, by normalized name."""
    try:
        children = os.listdir(directory)  # in its order, as importlib.metadata reads it
    except OSError:  # not a directory (a zip file), or gone
        return {}
    found: dict[str, str] = {}
    for child in children:
        low = child.lower()
        if low.endswith(_SUFFIXES):
            found.setdefault(normalized(low.rpartition(".")[0].partition("-")[0]), os.path.join(directory, child))
    return found


def _version(entry: str) -> str | None:
    """The Version header of a metadata entry (a dist-info or egg-info directory, or an egg-info file)."""
    files = [os.path.join(entry, name) for name in _METADATA_FILES] if os.path.isdir(entry) else [entry]
    for file in files:
        try:
            with open(file, encoding="utf-8", errors="replace") as lines:
                return _version_header(lines)
        except OSError:
            continue
    return None


def _version_header(lines: Iterable[str]) -> str | None:
    """The Version header's value; only the headers are read (torch's METADATA has 38 kB of description)."""
    for line in lines:
        if not line.strip():
            break  # the headers end at the first blank line
        key, _, value = line.partition(":")
        if key.strip().lower() == "version":
            return value.strip()
    return None
