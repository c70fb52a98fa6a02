"""Curated image specs: small TOML files naming a stack and the image options for it.

A spec is a request (resolved against the knowledge base) plus image options. The curated ones
ship in images/, each with its rendered Dockerfile checked in beside it (NAME.Dockerfile).

    description = "PyTorch 2.0.1 on CUDA 11.7 with cuDNN 8, Ubuntu 20.04"
    tag = "gpuenv/pytorch:2.0.1-cu117-cudnn8-ubuntu20.04"
    [stack]
    torch = "2.0.1"
    cuda = "11.7"
    [image]
    cudnn = true
    with = ["torchvision", "torchaudio"]
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuenv import schema, validate
from gpuenv.errors import BadRequest
from gpuenv.resources import shipped_dir

_STACK_KEYS = {"torch", "cuda", "rocm", "driver", "python", "gpu", "os"}
_IMAGE_KEYS = {"flavor", "cudnn", "with", "slim", "pip"}
_TOP_KEYS = {"description", "tag", "stack", "image"}
_SPEC_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,80}", re.ASCII)


@dataclass(frozen=True)
class ImageSpec:
    name: str
    description: str
    tag: str | None
    stack: dict[str, str]  # Request fields
    image: dict[str, Any] = field(default_factory=dict)  # flavor, cudnn, with, slim, pip


def find_spec(value: str) -> Path:
    """A spec file by path, or a curated spec by name ('cu117-cudnn-ubuntu20.04')."""
    validate.path_length(value, "--spec")
    path = Path(value)
    if path.is_file():
        return path
    if _SPEC_NAME.fullmatch(value.removesuffix(".toml")):
        curated = shipped_dir("images") / f"{value.removesuffix('.toml')}.toml"
        if curated.is_file():
            return curated
    known = ", ".join(p.stem for p in curated_specs())
    raise BadRequest(f"no image spec {value!r}", hint=f"give a TOML file, or a curated name: {known}")


def curated_specs() -> list[Path]:
    return sorted(shipped_dir("images").glob("*.toml"))


def load_spec(path: Path) -> ImageSpec:
    data = schema.load(path, "image spec", "spec", hint="see docs/build-image.md")
    _only(data, _TOP_KEYS, str(path))
    stack = _table(data, "stack", _STACK_KEYS, path)
    image = _table(data, "image", _IMAGE_KEYS, path)
    checks: dict[str, Callable[[str, str], str]] = {
        "torch": validate.version,
        "cuda": validate.version,
        "rocm": validate.version,
        "python": validate.version,
        "driver": lambda v, _w: validate.driver(v),
        "gpu": lambda v, _w: validate.gpu(v),
        "os": lambda v, _w: validate.os_name(v),
    }
    for key, value in stack.items():
        if not isinstance(value, str):
            raise BadRequest(f"{path}: stack.{key} must be a string", hint='e.g. cuda = "11.7"')
        stack[key] = checks[key](value, f"stack.{key}")
    _check_image(image, path)
    tag = data.get("tag")
    if tag is not None:
        tag = validate.image_ref(_string(tag, "tag", path), f"{path}: tag")
    description = _string(data.get("description", ""), "description", path)
    return ImageSpec(path.stem, description, tag, stack, image)


def _check_image(image: dict[str, Any], path: Path) -> None:
    for key in ("cudnn", "slim"):
        if key in image and not isinstance(image[key], bool):
            raise BadRequest(f"{path}: image.{key} must be true or false", hint=f"{key} = true")
    if "flavor" in image:
        _string(image["flavor"], "image.flavor", path)
    for key in ("with", "pip"):
        values = image.get(key, [])
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise BadRequest(f"{path}: image.{key} must be a list of strings", hint=f'{key} = ["torchvision"]')
    for requirement in image.get("pip", []):
        validate.pip_requirement(requirement)


def _table(data: dict[str, Any], name: str, keys: set[str], path: Path) -> dict[str, Any]:
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise BadRequest(f"{path}: [{name}] must be a table", hint="see docs/build-image.md")
    _only(table, keys, f"{path} [{name}]")
    return dict(table)


def _only(table: dict[str, Any], keys: set[str], where: str) -> None:
    unknown = sorted(set(table) - keys)
    if unknown:
        raise BadRequest(f"{where}: unknown key {unknown[0]!r}", hint=f"known: {', '.join(sorted(keys))}")


def _string(value: Any, what: str, path: Path) -> str:
    if not isinstance(value, str) or "\n" in value or len(value) > 200:
        raise BadRequest(f"{path}: {what} must be a one-line string", hint="see docs/build-image.md")
    return value


def spec_options(spec: ImageSpec) -> dict[str, Any]:
    """The ImageOptions fields a spec sets (the command line may override each)."""
    options: dict[str, Any] = {}
    for key in ("flavor", "cudnn", "slim"):
        if key in spec.image:
            options[key] = spec.image[key]
    if "with" in spec.image:
        options["with_packages"] = with_packages(spec.image["with"])
    if "pip" in spec.image:
        options["pip"] = tuple(spec.image["pip"])
    return options


def with_packages(values: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """--with values ('torchvision,torchaudio', 'none') as a tuple of package names."""
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if "none" in names:
        if len(names) > 1:
            raise BadRequest("--with none cannot be combined with packages", hint="--with none, or list the packages")
        return ()
    return tuple(dict.fromkeys(names))
