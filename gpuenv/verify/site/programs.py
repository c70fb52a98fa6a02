"""Site checks from a checks directory: executables, NHC-style, each declaring itself in
`# gpuenv-check:` header lines or in a side TOML file (its file name with `.toml` added).

gpuenv may run as root, so it trusts the directory and each program as it trusts every file root
acts on (gpuenv.files): owned by root or the user running gpuenv, writable by nobody else, never a
symlink. Everything is opened through the directory's descriptor, and a program is run from the
descriptor its trust was checked on (open_checked), so nothing can be swapped in between.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import replace
from pathlib import Path

from gpuenv.errors import BadRequest
from gpuenv.files import open_no_link, read_own_file, untrusted
from gpuenv.schema import parse_toml
from gpuenv.verify.site.spec import SiteSpec, declared

HEADER = re.compile(r"^#+\s*gpuenv-check:(.*)$", re.MULTILINE)
HEADER_BYTES = 4096  # the header lines are among a program's first lines
SIDE = ".toml"
HINT = (
    "a checks directory and its programs are root's (or yours), writable by nobody else, never symlinks: "
    "chown root:root and chmod 755 them (docs/verify.md, Site checks)"
)


def owners() -> tuple[int, ...]:
    return tuple(dict.fromkeys((0, os.geteuid())))


def discover(directory: Path) -> list[SiteSpec]:
    """Every program of the directory, declared; exit 2 naming the first entry that is refused
    (untrusted, a symlink, not executable, declaring nothing or itself twice) or a side file
    without its program."""
    folder = Path(os.path.abspath(directory))
    dir_fd = open_folder(folder)
    try:
        names = sorted(os.listdir(dir_fd))
        programs = [n for n in names if not n.startswith(".") and not n.endswith(SIDE)]
        orphans = [n for n in names if n.endswith(SIDE) and n.removesuffix(SIDE) not in programs]
        if orphans:
            raise BadRequest(f"--checks-dir {folder}: {orphans[0]} declares no program of the folder", hint=HINT)
        return [_program(folder, dir_fd, name, f"{name}{SIDE}" in names) for name in programs]
    finally:
        os.close(dir_fd)


def open_folder(folder: Path) -> int:
    """The checks directory, opened and trusted."""
    fd = open_no_link(folder, "--checks-dir", hint=HINT, folder=True)
    problem = untrusted(os.fstat(fd), owners())
    if problem:
        os.close(fd)
        raise BadRequest(f"--checks-dir {folder} {problem}: gpuenv runs nothing from it", hint=HINT)
    return fd


def _program(folder: Path, dir_fd: int, name: str, has_side: bool) -> SiteSpec:
    path = folder / name
    fd = _open_program(path, dir_fd)
    try:
        info = os.fstat(fd)
        head = os.pread(fd, HEADER_BYTES, 0)
    finally:
        os.close(fd)
    header = "\n".join(m.strip() for m in HEADER.findall(head.decode("utf-8", errors="replace")))
    if header and has_side:
        raise BadRequest(f"site check {path} declares itself twice: in its header and in {name}{SIDE}", hint=HINT)
    if not header and not has_side:
        raise BadRequest(
            f"site check {path} declares nothing",
            hint=f'add header lines (# gpuenv-check: name = "..." and timeout = N) or a side file {name}{SIDE}',
        )
    source = f"{path}{SIDE}" if has_side else f"{path} (its # gpuenv-check: lines)"
    text = (
        read_own_file(f"{name}{SIDE}", "site check", hint=HINT, owners=owners(), dir_fd=dir_fd).decode(errors="replace")
        if has_side
        else header
    )
    try:
        data = parse_toml(text)
    except ValueError as exc:
        raise BadRequest(f"site check {source}: not valid TOML: {exc}", hint=HINT) from None
    spec = declared(data, kind="program", origin=f"program {path}", target=str(path), where=f"site check {source}")
    return replace(spec, identity=(info.st_dev, info.st_ino))


def _open_program(path: Path, dir_fd: int) -> int:
    """A program of the directory, opened and trusted: a regular, executable file."""
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        why = f"cannot be read: {exc.strerror}"
        if exc.errno == errno.ELOOP:
            why = "is a symlink (gpuenv follows none here)"
        raise BadRequest(f"site check {path} {why}", hint=HINT) from None
    info = os.fstat(fd)
    problem = untrusted(info, owners())
    if not stat.S_ISREG(info.st_mode):
        problem = "is a folder" if stat.S_ISDIR(info.st_mode) else "is not a regular file"
    elif not info.st_mode & 0o111:
        problem = "is not executable (chmod 755 it)"
    if problem:
        os.close(fd)
        raise BadRequest(f"site check {path} {problem}: gpuenv runs nothing from it", hint=HINT)
    return fd


def open_checked(spec: SiteSpec) -> int:
    """The program's descriptor for running it: its folder and the file trusted again, and the file
    the very one that was read (same device and inode); BadRequest saying what changed otherwise."""
    path = Path(spec.target)
    dir_fd = open_folder(path.parent)
    try:
        fd = _open_program(path, dir_fd)
    finally:
        os.close(dir_fd)
    info = os.fstat(fd)
    if (info.st_dev, info.st_ino) != spec.identity:
        os.close(fd)
        raise BadRequest(f"site check {path} was replaced since it was read: gpuenv runs nothing from it", hint=HINT)
    return fd
