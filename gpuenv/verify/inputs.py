"""`verify --inputs -`: the policy and baseline files of a run, sent as one JSON document on stdin.

`fleet verify` runs verify on each host as one command (one round trip): the files the controller
names cannot be copied beside it first, so they travel on the command's standard input and verify
unpacks them into a private folder of its own for the run (removed after it, whatever happens).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuenv.errors import BadRequest
from gpuenv.files import DEFAULT_LIMIT, read_bytes

SCHEMA = "gpuenv.verify-inputs/1"
NAMES = ("policy", "baseline")  # verify's options that name an input file
STDIN = "-"
_HINT = "gpuenv fleet verify sends these; elsewhere use --policy FILE and --baseline FILE"


def pack(texts: dict[str, str]) -> str:
    """The document for texts ({"policy": ..., "baseline": ...}, either or both), on one line."""
    unknown = set(texts) - set(NAMES)
    assert not unknown, unknown
    return json.dumps({"schema": SCHEMA, **texts})


def unpack(raw: bytes, source: str) -> dict[str, str]:
    """The texts a document carries; a bad request when it is none."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"--inputs {source}: not JSON ({str(exc)[:80]})", hint=_HINT) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise BadRequest(f"--inputs {source}: not a {SCHEMA} document", hint=_HINT)
    texts = {k: v for k, v in doc.items() if k != "schema"}
    bad = [k for k, v in texts.items() if k not in NAMES or not isinstance(v, str)]
    if bad:
        raise BadRequest(f"--inputs {source}: {bad[0]!r} is not an input file verify takes", hint=_HINT)
    return texts


def _read(source: str) -> bytes:
    if source != STDIN:
        return read_bytes(source, "--inputs", hint=_HINT)
    raw: bytes = sys.stdin.buffer.read(DEFAULT_LIMIT + 1)
    if len(raw) > DEFAULT_LIMIT:
        raise BadRequest(f"--inputs -: more than {DEFAULT_LIMIT >> 20} MiB on stdin", hint=_HINT)
    return raw


@contextmanager
def unpacked(source: str) -> Iterator[dict[str, Path]]:
    """The files of the document at source (`-`: stdin), each in a private folder for as long as the run."""
    texts = unpack(_read(source), source)
    folder = Path(tempfile.mkdtemp(prefix="gpuenv-inputs-"))  # mode 0700: this user's alone
    try:
        paths = {}
        for name, text in texts.items():
            paths[name] = folder / f"{name}.json"
            paths[name].write_text(text, encoding="utf-8")
        yield paths
    finally:
        shutil.rmtree(folder, ignore_errors=True)
