"""The one rule for every file gpuenv reads from a user or writes for one.

Writing (`check_output` before any work, `write_output` at the end):

- `-` is standard output (for formats that make sense there; the caller decides).
- A missing path or a regular file is written atomically: a temporary file in the same folder,
  then a rename over the target, so a reader never sees half a file.
- A character device or a FIFO (`/dev/null`, a named pipe) is written through, never renamed
  over; so are `/dev/stdout`, `/dev/stderr` and `/dev/fd/N`, which name an open descriptor.
- A directory, a block device, a socket (or anything else) is refused with exit 2.
- Symlinks are followed as `open()` follows them: the kind of the final target decides, and a
  regular file is replaced at its resolved path (the link itself stays). Like the kernel's
  `protected_symlinks`, a link in a sticky world-writable folder (such as /tmp) is followed only
  when it belongs to the caller or to the folder's owner; anyone else's is refused (exit 2).

A state file gpuenv reopens by path (the GPU history) is a regular file or absent
(`check_file_or_absent`), checked before any library opens it.

Reading (`read_text`): every input file is read through a size cap per kind, so `/dev/zero` or
a runaway file is a bad request instead of a hang. A file root acts on (`read_own_file`) must be a
regular file, not a symlink, the running user's and writable by nobody else.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuenv.errors import BadRequest, CannotRun

MiB = 1 << 20
LIMITS = {"inventory": 64 * MiB, "knowledge base": 16 * MiB, "snapshot": 64 * MiB}
DEFAULT_LIMIT = 1 * MiB
STDOUT = "-"
_DESCRIPTOR_PATHS = ("/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/self/fd/")
_CHUNK = 1 << 16


@dataclass(frozen=True)
class Output:
    """A checked output target: stdout, a file replaced atomically, or a stream written through."""

    given: str
    kind: str  # "stdout" | "atomic" | "through"
    path: Path | None  # where the bytes go (the resolved path for "atomic")

    @property
    def is_stdout(self) -> bool:
        return self.kind == "stdout"


def _classify(given: str, what: str) -> Output:
    if given == STDOUT:
        return Output(given, "stdout", None)
    path = Path(given)
    if given.startswith(_DESCRIPTOR_PATHS):
        return Output(given, "through", path)
    _check_link(path, what)
    try:
        st = path.stat()
    except FileNotFoundError:
        if path.is_symlink():  # a dangling link: write where it points
            return Output(given, "atomic", Path(os.path.realpath(path)))
        return Output(given, "atomic", path)
    except OSError as exc:
        raise BadRequest(f"{what} {given}: {exc.strerror}", hint="give a writable file path") from exc
    if stat.S_ISREG(st.st_mode):
        return Output(given, "atomic", Path(os.path.realpath(path)))
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return Output(given, "through", path)
    raise BadRequest(f"{what} {given} is {_kind(st.st_mode)}", hint="give a file path (or - for standard output)")


def _kind(mode: int) -> str:
    """What a path that is no regular file is, for a message."""
    kinds = {stat.S_ISDIR: "a directory", stat.S_ISBLK: "a block device", stat.S_ISCHR: "a character device"}
    kinds |= {stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket"}
    return next((name for test, name in kinds.items() if test(mode)), "not a regular file")


def check_file_or_absent(path: str | Path, what: str, *, hint: str) -> None:
    """A file gpuenv keeps and reopens by path (the GPU history) is a regular file (links followed), or
    nothing yet. Anything else is refused before a library opens it: SQLite would wait on a FIFO, and
    on a device another process holds a lock on (as on /dev/null) it waits out its busy timeout."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BadRequest(f"{what} {path}: {exc.strerror}", hint=hint) from exc
    if not stat.S_ISREG(info.st_mode):
        raise BadRequest(f"{what} {path} is {_kind(info.st_mode)}, not a regular file", hint=hint)


def _check_link(path: Path, what: str) -> None:
    """Refuse to follow another user's symlink in a sticky world-writable folder."""
    if not path.is_symlink():
        return
    folder = path.parent.stat()
    sticky_public = folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH
    owner = path.lstat().st_uid
    if sticky_public and owner not in (os.geteuid(), folder.st_uid):
        raise BadRequest(
            f"{what} {path} is a symlink owned by another user in a shared folder",
            hint="remove the link, or write somewhere only you can write",
        )


def output_kind(given: str | Path) -> str:
    """ "stdout", "atomic" (a file, replaced) or "through" (a stream); refused kinds raise BadRequest."""
    return _classify(str(given), "output").kind


def check_output(given: str | Path, what: str, *, stdout_ok: bool = True) -> Output:
    """Check an output path before any work starts: its kind, and that it can be written (exit 2)."""
    target = _classify(str(given), what)
    if target.is_stdout:
        if not stdout_ok:
            raise BadRequest(f"{what} cannot be standard output", hint="give a file path")
        return target
    assert target.path is not None
    if target.kind == "through":
        if not os.access(target.path, os.W_OK):
            raise BadRequest(f"{what} {given} is not writable", hint="give a path you may write")
        return target
    folder = target.path.parent
    if not folder.is_dir():
        raise BadRequest(f"{what}: folder {folder} does not exist", hint="create it first, or give another path")
    try:  # the one honest test: make (and remove) a file where the atomic write will make its own
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{target.path.name}.", suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise BadRequest(
            f"{what} {given}: cannot write in {folder} ({exc.strerror})", hint="give a path you may write"
        ) from exc
    return target


def refuse_inputs(outputs: dict[str, str | Path | None], inputs: Iterable[str | Path | None]) -> None:
    """Refuse, before any work, an output that would destroy what the command reads or writes (exit 2):
    an input file however it is reached (the same device and inode: through a symlink or a hard link),
    a *.json file below an input folder the command reads (the link's target decides), or the file
    another output names. outputs: {flag: path or None}; standard output and streams are never inputs."""
    read = [(Path(p), _identity(p)) for p in inputs if p is not None]
    written: dict[object, str] = {}
    for flag, given in outputs.items():
        if given is None or str(given) == STDOUT:
            continue
        target = _identity(given)
        for path, identity in read:
            if target is not None and (identity == target or (path.is_dir() and _inside(given, target, path))):
                raise BadRequest(
                    f"{flag} {given} is one of the inputs ({path}): writing it would destroy it",
                    hint=f"give {flag} a path outside the files and folders read",
                )
        same = target or (None if os.path.lexists(given) else os.path.realpath(given))  # a stream: none
        if same is not None and same in written:
            raise BadRequest(
                f"{flag} {given} and {written[same]} are the same file: one would overwrite the other",
                hint="give each output its own file",
            )
        written[same] = f"{flag} {given}"


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths reach one existing file (its device and inode: through links, hard or symbolic)."""
    found = _identity(a)
    return found is not None and found == _identity(b)


def _identity(path: str | Path) -> tuple[int, int] | None:
    """(device, inode) of the file a path reaches (links followed); None when there is none yet."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return None if stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode) else (info.st_dev, info.st_ino)


def _inside(given: str | Path, target: tuple[int, int], folder: Path) -> bool:
    """Whether an existing file is one a folder's reader takes in (as `fleet report DIR` reads every
    *.json below it): by where its links resolve, or, with more than one hard link, by inode."""
    real = Path(os.path.realpath(given))
    if real.suffix == ".json" and real.is_relative_to(os.path.realpath(folder)):
        return True
    if os.stat(given).st_nlink < 2:
        return False
    return any(_identity(os.path.join(root, f)) == target for root, _, names in os.walk(folder) for f in names)


def write_output(target: Output | str | Path, text: str, *, what: str = "output", mode: int = 0o644) -> None:
    """Write `text` to a target by the rule above (re-checked now: the path may have changed). A write
    that fails (a FIFO nobody reads, a full disk) is CannotRun naming the target (exit 3)."""
    given = target.given if isinstance(target, Output) else str(target)
    out = _classify(given, what)
    if out.is_stdout:  # a closed pipe on stdout is the CLI's to handle, as for any other output
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    assert out.path is not None
    try:
        if out.kind == "through":
            _write_through(out.path, text)
        else:
            write_atomic(out.path, text, mode=mode)
    except OSError as exc:
        why = "no process reads that pipe" if exc.errno == errno.ENXIO else (exc.strerror or str(exc))
        raise CannotRun(
            f"could not write {what} {given}: {why}", hint="check the disk, or the reader of the pipe"
        ) from exc


def _write_through(path: Path, text: str) -> None:
    """Append to a stream; a FIFO nobody reads is an error (ENXIO) rather than a wait without end."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC)
    os.set_blocking(fd, True)  # a reader exists: let it take the text at its own pace
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def write_atomic(path: Path, text: str, *, mode: int = 0o644) -> None:
    """Write to a temporary file in the same folder, then rename over the target."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def limit_for(kind: str) -> int:
    return LIMITS.get(kind, DEFAULT_LIMIT)


def read_bytes(
    path: Path | str, what: str, *, kind: str | None = None, hint: str | None = None, regular: bool = False
) -> bytes:
    """Read a user's input file, at most the cap for its kind (inventory, knowledge base, other). The
    open never waits (a FIFO nobody writes reads as empty); with `regular`, only a regular file is read."""
    hint = hint or "give a readable file"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise BadRequest(f"cannot read {what} {path}: {exc.strerror or exc}", hint=hint) from exc

    def refused(info: os.stat_result) -> str | None:
        readable = stat.S_ISREG(info.st_mode) or (
            not regular and (stat.S_ISFIFO(info.st_mode) or stat.S_ISCHR(info.st_mode))
        )
        return None if readable else "is not a regular file"

    return _read_open(fd, f"{what} {path}", refused, limit=limit_for(kind or what), hint=hint)


def read_own_file(
    path: Path | str,
    what: str,
    *,
    hint: str,
    owners: tuple[int, ...] | None = None,
    limit: int = DEFAULT_LIMIT,
    dir_fd: int | None = None,
) -> bytes:
    """Read a file whose content root may act on (the power state, the caps tune power applied): a regular
    file, not a symlink, owned by one of `owners` (default: the user running gpuenv) and writable by nobody
    else; read without waiting (a FIFO in its place is refused, not waited on) and at most `limit` bytes.
    Anything else is a BadRequest saying why. `dir_fd`: `path` is a name in that open folder."""
    fd = open_no_link(path, what, hint=hint, dir_fd=dir_fd)
    trusted = (os.geteuid(),) if owners is None else owners
    return _read_open(fd, f"{what} {path}", lambda info: _not_own_file(info, trusted), limit=limit, hint=hint)


def open_no_link(path: Path | str, what: str, *, hint: str, dir_fd: int | None = None, folder: bool = False) -> int:
    """An open descriptor of a file (or, with `folder`, a folder) that is not a symlink; the open never
    waits (a FIFO). Anything else is a BadRequest saying why."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_DIRECTORY if folder else 0)
    try:
        return os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        why = f"cannot be read: {exc.strerror}"
        if exc.errno == errno.ELOOP or (folder and exc.errno == errno.ENOTDIR and _is_link(path, dir_fd)):
            why = "is a symlink (gpuenv follows none here)"  # O_DIRECTORY on a link says ENOTDIR
        elif exc.errno == errno.ENOTDIR and folder:
            why = "is not a folder"
        raise BadRequest(f"{what} {path} {why}", hint=hint) from exc


def _read_open(fd: int, name: str, refused: Callable[[os.stat_result], str | None], *, limit: int, hint: str) -> bytes:
    """Read and close an open file: `refused` says why it is not to be read (or None); at most `limit` bytes."""
    try:
        problem = refused(os.fstat(fd))
        if problem:
            raise BadRequest(f"{name} {problem}", hint=hint)
        os.set_blocking(fd, True)  # opened: a writer there may take its time
        data = _read_capped(fd, limit)
    except OSError as exc:
        raise BadRequest(f"cannot read {name}: {exc.strerror or exc}", hint=hint) from exc
    finally:
        os.close(fd)
    if len(data) > limit:
        size = f"{limit // MiB} MiB" if limit % MiB == 0 else f"{limit // 1024} KiB"
        raise BadRequest(f"{name} is larger than {size}", hint=hint)
    return data


def _not_own_file(info: os.stat_result, owners: tuple[int, ...]) -> str | None:
    """Why a file is not one only its trusted owners could have written, or None."""
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    return untrusted(info, owners)


def _is_link(path: Path | str, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def untrusted(info: os.stat_result, owners: tuple[int, ...]) -> str | None:
    """Why a file or folder may have been written by someone other than its trusted owners, or None."""
    if info.st_uid not in owners:
        return f"belongs to another user (uid {info.st_uid}, not {' or '.join(map(str, owners))})"
    if info.st_mode & 0o022:
        return f"may be written by others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _read_capped(fd: int, limit: int) -> bytes:
    """At most limit + 1 bytes (one more than allowed tells the caller the file is too large)."""
    chunks, size = [], 0
    while size <= limit:
        chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_text(
    path: Path | str, what: str, *, kind: str | None = None, hint: str | None = None, regular: bool = False
) -> str:
    data = read_bytes(path, what, kind=kind, hint=hint, regular=regular)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(
            f"{what} {path} is not UTF-8 text (byte {exc.start})", hint=hint or "give a text file"
        ) from exc


def wheelhouse_files(folder: Path, what: str = "--wheelhouse") -> list[Path]:
    """The entries of a wheelhouse, each a regular file: a symlink (to /etc/shadow, say), a folder,
    a pipe or a device is refused, so nothing outside the folder reaches an image or a host."""
    entries = []
    try:
        listing = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        raise BadRequest(f"cannot list {what} {folder}: {exc.strerror}", hint="give a readable directory") from exc
    for entry in listing:
        if not entry.is_file(follow_symlinks=False):
            kind = "a symlink" if entry.is_symlink() else "a folder" if entry.is_dir() else "not a regular file"
            raise BadRequest(
                f"{what} entry {entry.name!r} is {kind}",
                hint="a wheelhouse holds regular files only: copy the wheel in instead of linking it",
            )
        entries.append(Path(entry.path))
    return entries


# --- what gpuenv wrote into a directory ------------------------------------------------------

MANIFEST = ".gpuenv-manifest"


def owned_entries(folder: Path) -> set[str]:
    """The top-level entries gpuenv wrote into a folder, from its manifest (none when absent or unreadable)."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    entries = data.get("entries") if isinstance(data, dict) else None
    return (
        {e for e in entries if isinstance(e, str) and "/" not in e and e not in ("", ".", "..")} if entries else set()
    )


def write_manifest(folder: Path, entries: list[str]) -> None:
    write_atomic(folder / MANIFEST, json.dumps({"written_by": "gpuenv", "entries": sorted(set(entries))}) + "\n")


def replace_owned(folder: Path, files: list[str], dirs: list[str]) -> None:
    """Make room for a new render: remove what the manifest says gpuenv wrote; a file gpuenv renders
    by name is replaced; anything else in the way (a directory of the user's) is refused, exit 2."""
    owned = owned_entries(folder)
    for name in sorted(owned | set(files) | set(dirs)):
        path = folder / name
        if not (path.exists() or path.is_symlink()):
            continue
        if name not in owned and (name in dirs or not path.is_file() or path.is_symlink()):
            raise BadRequest(
                f"{path} is not gpuenv's (its manifest {MANIFEST} does not list it), so --force leaves it alone",
                hint="move it away, or render into another directory",
            )
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def check_tree(folder: Path, what: str, *, ignore: Any = None) -> None:
    """Every entry of a tree gpuenv will copy is a folder, a symlink (copied as a link) or a
    readable regular file: a FIFO would hang the copy, a device or socket cannot be copied (exit 2)."""
    for root, dirs, names in os.walk(folder):
        skipped = ignore(root, [*dirs, *names]) if ignore else set()
        dirs[:] = [d for d in dirs if d not in skipped]
        for name in names:
            if name in skipped:
                continue
            path = Path(root, name)
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                continue
            if not stat.S_ISREG(mode):
                raise BadRequest(f"{what}: {path} is not a regular file", hint="remove it from the directory")
            if not os.access(path, os.R_OK):
                raise BadRequest(f"{what}: {path} is not readable", hint="fix its permissions or remove it")
