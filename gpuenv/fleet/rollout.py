"""What is about to be rolled out, as a Stack: a stack file, the stack options, an image built by `build-image`
(its io.gpuenv.* labels), or a requirements file, PEP 751 `pylock.toml` or `uv.lock` pinning torch.

An image or a lockfile names the torch release and its wheel build (`torch==2.7.0+cu128`, or a plain version
with the index it comes from); the rest of the stack is the knowledge base's for that build, resolved as
`resolve --torch 2.7.0+cu128` resolves it, so a fleet is judged by the same facts whatever names the stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuenv import schema
from gpuenv.adapters import docker
from gpuenv.errors import BadRequest
from gpuenv.files import read_text
from gpuenv.fleet.source import OnHost
from gpuenv.kb import KnowledgeBase
from gpuenv.platforms.arch import cpu_arch
from gpuenv.resolve.request import Request
from gpuenv.resolve.service import resolve
from gpuenv.stack import Stack
from gpuenv.stack_service import StackRequest, stack_for

LABEL = "io.gpuenv."
_PIN = re.compile(r"^\s*torch\s*===?\s*([0-9][0-9a-z.]*)(?:\+([0-9a-z.]+))?\s*(?:;.*)?(?:#.*)?$", re.I)
_INDEX = re.compile(r"^\s*--(?:extra-)?index-url[ =]\s*(\S+)", re.I)
_WHEEL = re.compile(r"torch-[0-9][0-9a-z.]*(?:(?:\+|%2B)([0-9a-z.]+))?-(cp3\d+)-[^/]*?(x86_64|aarch64)\.whl", re.I)
LOCK_HINT = "give a requirements file with torch==VERSION+BUILD, or a pylock.toml / uv.lock holding torch"


@dataclass(frozen=True)
class Rollout:
    """What is to be rolled out: the stack options or a stack file, an image, or a lockfile; one of them."""

    stack: StackRequest = field(default_factory=StackRequest)
    image: str | None = None
    lockfile: Path | None = None
    on_host: bool = False  # --on-host: the stack file or options are installed on the host (as provision does)

    def given(self) -> int:
        stack = self.stack.stack_file is not None or bool(self.stack.constraints.given())
        return sum((stack, self.image is not None, self.lockfile is not None))


@dataclass(frozen=True)
class ImageFacts:
    """What an image says of itself: its labels and its CPU architecture (Docker's name, amd64)."""

    labels: dict[str, str]
    architecture: str | None


def rolled_out(rollout: Rollout, kb: KnowledgeBase, *, kb_path: Path | None) -> tuple[Stack, OnHost | None]:
    """The stack the rollout names (resolved for a host: an image or a lockfile exists already), and how it is
    installed on a host: a lockfile by pip into the host's Python; a stack file as it is, resolved for its OS
    (provision --stack); the options on each host's own OS (provision --torch …); None: an image, which brings
    its own OS and Python."""
    if rollout.given() > 1:
        raise BadRequest("give one of --stack, --image, --requirements or the stack options", hint="one at a time")
    if rollout.image is not None:
        if rollout.on_host:
            raise BadRequest(
                "--on-host judges a stack installed on the host, and an image brings its own OS and Python",
                hint="drop --on-host, or check the stack it was built from with --stack FILE --on-host",
            )
        return resolve(kb, image_request(rollout.image, _image(rollout.image))), None
    if rollout.lockfile is not None:
        asked = lock_request(kb, rollout.lockfile)
        return resolve(kb, asked), OnHost(python=asked.python, by_pip=True)
    stack = stack_for(replace(rollout.stack, purpose="host" if rollout.on_host else "image"), kb_path=kb_path)
    if not rollout.on_host:
        return stack, None  # an image's, as resolve's is unless --for host
    if rollout.stack.stack_file is not None:
        return stack, OnHost(stack.os, stack.python)
    given = rollout.stack.constraints
    return stack, OnHost.resolved(given.os, given.python)


def _image(ref: str) -> ImageFacts:
    labels, architecture = docker.image_config(ref)
    return ImageFacts(labels, architecture)


def image_request(ref: str, image: ImageFacts) -> Request:
    """The stack an image was built from, as its labels name it (torch, its build, Python, OS) and its architecture."""
    labels = image.labels
    torch = labels.get(f"{LABEL}torch")
    build = labels.get(f"{LABEL}build") or labels.get(f"{LABEL}cuda-build")
    if not torch or not build:
        raise BadRequest(
            f"image {ref} has no gpuenv labels ({LABEL}torch, {LABEL}build): it was not built by gpuenv build-image",
            hint="check the stack it was built from with --stack FILE, or its torch with --torch VERSION+BUILD",
        )
    arch = cpu_arch(image.architecture) if image.architecture else None
    if image.architecture and arch is None:
        raise BadRequest(f"image {ref} is built for {image.architecture}, an architecture gpuenv does not serve")
    return Request(
        torch=f"{torch}+{build}",
        python=labels.get(f"{LABEL}python"),
        os=labels.get(f"{LABEL}os"),
        cpu_arch=arch.name if arch else None,
    )


def lock_request(kb: KnowledgeBase, path: Path) -> Request:
    """The torch a requirements file, pylock.toml or uv.lock pins, as a request (`--torch VERSION+BUILD`)."""
    text = read_text(path, "lockfile", hint=LOCK_HINT)
    if path.suffix == ".toml" or path.name.endswith(".lock"):
        try:
            return _from_lock(kb, schema.parse_toml(text), path)
        except ValueError as exc:
            raise BadRequest(f"lockfile {path} is not TOML: {str(exc)[:120]}", hint=LOCK_HINT) from None
    return _from_requirements(kb, text, path)


def _from_requirements(kb: KnowledgeBase, text: str, path: Path) -> Request:
    pins = [m for line in text.splitlines() if (m := _PIN.match(line))]
    if len(pins) != 1:
        raise BadRequest(f"{path} pins torch {len(pins)} times, not once (torch==VERSION)", hint=LOCK_HINT)
    indexes = [m.group(1) for line in text.splitlines() if (m := _INDEX.match(line))]
    version, build = pins[0].group(1), pins[0].group(2)
    return _pinned(kb, version, build or _index_build(indexes), path, None, None)


def _from_lock(kb: KnowledgeBase, data: Any, path: Path) -> Request:
    """pylock.toml's [[packages]] (PEP 751: version, index, wheels) or uv.lock's [[package]] (version, source)."""
    rows = (data.get("packages") or data.get("package") or []) if isinstance(data, dict) else []
    torch = [p for p in rows if isinstance(p, dict) and str(p.get("name", "")).lower() == "torch"]
    if len(torch) != 1:
        raise BadRequest(f"{path} holds torch {len(torch)} times, not once", hint=LOCK_HINT)
    row = torch[0]
    version, _, build = str(row.get("version", "")).partition("+")
    source: dict[str, Any] = row["source"] if isinstance(row.get("source"), dict) else {}
    index = row.get("index") or source.get("registry")
    wheels = [w for w in row.get("wheels") or [] if isinstance(w, dict)]
    found = [m for w in wheels if (m := _WHEEL.search(str(w.get("url") or w.get("name") or "")))]
    named = build or (found[0].group(1) if found and found[0].group(1) else "") or _index_build([str(index or "")])
    python = f"3.{found[0].group(2)[3:]}" if len(found) == 1 else None
    arch = found[0].group(3) if len({m.group(3) for m in found}) == 1 and found else None
    return _pinned(kb, version, named, path, python, arch)


def _index_build(indexes: list[str]) -> str | None:
    """The build a PyTorch wheel index names by its last path segment (…/whl/cu128), or None."""
    for url in indexes:
        last = url.rstrip("/").rsplit("/", 1)[-1]
        if re.fullmatch(r"[a-z]+[0-9][0-9.]*|cpu", last, re.ASCII):
            return last
    return None


def _pinned(
    kb: KnowledgeBase, version: str, build: str | None, path: Path, python: str | None, arch: str | None
) -> Request:
    if not re.fullmatch(r"[0-9]+(\.[0-9]+){1,2}", version, re.ASCII):
        raise BadRequest(f"{path} pins torch {version!r}, not a release version", hint=LOCK_HINT)
    if build is None:  # the plain PyPI wheel: the build torch publishes there
        release = next((t for t in kb.torch if t.version == version), None)
        if release is None:
            raise BadRequest(f"{path} pins torch {version}, which the knowledge base does not know", hint=LOCK_HINT)
        build = release.default_build
    return Request(torch=f"{version}+{build}", python=python, cpu_arch=arch)
