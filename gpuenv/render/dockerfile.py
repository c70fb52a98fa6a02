"""The Dockerfile and the small text files of a build context, rendered from a Stack.

Pure: a Stack, ImageOptions and the knowledge base's row for the stack's OS in, strings out. What
differs by platform (the base image of a flavour, the GPU software's labels, the comments and
environment of the Dockerfile) comes from the stack's platform's image half (gpuenv.platforms);
the rest is every platform's. Copying the user's app, a wheelhouse and gpuenv's own wheel into the
context is done by gpuenv.render.context; building by the Docker adapter. Every value that reaches
the template is validated here first, whatever its origin.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from gpuenv import validate
from gpuenv.errors import BadRequest
from gpuenv.kb import OsInfo
from gpuenv.platforms.base import Platform
from gpuenv.platforms.registry import checked, for_stack
from gpuenv.render import jinja_env
from gpuenv.render.options import ImageOptions
from gpuenv.resources import shipped_dir
from gpuenv.stack import Stack

FLAVORS = ("runtime", "devel")
COMPANIONS = ("torchvision", "torchaudio")
LABEL_PREFIX = "io.gpuenv."
STACK_IN_IMAGE = "/opt/gpuenv/stack.json"
_WORD = re.compile(r"[a-z][a-z0-9-]{0,31}", re.ASCII)

# The deadsnakes PPA's signing key ("Launchpad PPA for deadsnakes"), pinned by full fingerprint.
DEADSNAKES_FINGERPRINT = "F23C5A6CF475977595C89F51BA6932366A755776"
# What the template knows how to write, by package manager: the OS facts themselves (package manager,
# apt codename, the dnf repository of build tools) come from the knowledge base's OS row.
IMAGE_PYTHON_SOURCES = {"apt": ("system", "distro", "deadsnakes"), "dnf": ("system", "appstream")}
COMPILERS = {"apt": ("gcc", "g++", "libc6-dev"), "dnf": ("gcc", "gcc-c++")}


@dataclass(frozen=True)
class RenderedImage:
    files: dict[str, str]  # name inside the build context -> text
    base_image: str
    variant: str  # which of the stack's base images: runtime, cudnn-runtime, cudnn-devel
    labels: dict[str, str]
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)


def render_image(stack: Stack, options: ImageOptions, os_info: OsInfo) -> RenderedImage:
    """Dockerfile, requirements, constraints and stack.json for one image on the OS `os_info` describes."""
    platform = _check_stack(stack, os_info)
    _check_options(stack, options, platform)
    variant = platform.image.variant(stack, options)
    base = options.base_image or stack.base_images[variant]
    labels = image_labels(stack, options, base)
    context = _template_values(stack, options, os_info, base, labels, platform)
    dockerfile = _render("Dockerfile.j2", context)
    files = {
        "Dockerfile": dockerfile,
        ".dockerignore": _render("dockerignore.j2", context),
        # the pins, and the constraints every later pip run (gpuenv's dependencies, --pip, the app's) keeps
        "requirements.txt": _lines(_torch_requirements(stack, options)),
        "constraints.txt": _lines(_torch_requirements(stack, options)),
        "extra-requirements.txt": _lines([*options.gpuenv_requirements, *options.pip]),
        "stack.json": json.dumps(stack.to_dict(), indent=2, sort_keys=True) + "\n",
    }
    return RenderedImage(
        files=files,
        base_image=base,
        variant=variant,
        labels=labels,
        notes=tuple(_notes(stack, options, variant, platform)),
        warnings=stack.warnings,
    )


def image_labels(stack: Stack, options: ImageOptions, base: str) -> dict[str, str]:
    """OCI labels plus gpuenv's, which carry the whole Stack so that an image says what it is."""
    platform = for_stack(stack)
    companions = {name: getattr(stack, name) for name in options.with_packages}
    software = platform.resolver.software(stack)
    title = f"PyTorch {stack.torch} ({stack.build}) on {software}, Python {stack.python}, {stack.os}"
    labels = {
        "org.opencontainers.image.title": title,
        "org.opencontainers.image.description": f"{options.flavor} image rendered by gpuenv",
        "org.opencontainers.image.version": f"{stack.torch}-{stack.build}",
        "org.opencontainers.image.base.name": base,
        f"{LABEL_PREFIX}schema": stack.schema,
        f"{LABEL_PREFIX}torch": stack.torch,
        **{f"{LABEL_PREFIX}{name}": str(version) for name, version in companions.items()},
        **{f"{LABEL_PREFIX}{name}": value for name, value in platform.image.labels(stack, options).items()},
        f"{LABEL_PREFIX}python": stack.python,
        f"{LABEL_PREFIX}os": stack.os,
        f"{LABEL_PREFIX}cpu-arch": stack.cpu_arch,
        f"{LABEL_PREFIX}numpy": stack.numpy,
        **{f"{LABEL_PREFIX}{name}": value for name, value in platform.image.host_labels(stack).items()},
        f"{LABEL_PREFIX}arch-list": stack.arch_list,
        f"{LABEL_PREFIX}index-url": options.index_url or stack.index_url,
        f"{LABEL_PREFIX}flavor": options.flavor + ("-slim" if options.slim else ""),
        f"{LABEL_PREFIX}stack-file": STACK_IN_IMAGE,
    }
    for value in labels.values():
        _label_safe(value)
    return labels


# --- checks -------------------------------------------------------------------------------------


def _check_stack(stack: Stack, os_info: OsInfo) -> Platform:
    """The stack's values, then what an image needs beyond them (a base image gpuenv renders for, a Python)."""
    platform = for_stack(checked(stack))
    if os_info.name != stack.os:
        raise BadRequest(f"the OS facts given are for {os_info.name}, not the stack's {stack.os}", hint="report a bug")
    if not stack.base_images or "image" not in os_info.roles:
        raise BadRequest(
            f"{stack.os} has no {platform.image.images} images, so no image can be built for it",
            hint="build on an Ubuntu or Rocky Linux base (--os ubuntu22.04, rockylinux9); use provision for hosts",
        )
    if os_info.package_manager not in IMAGE_PYTHON_SOURCES:
        known = ", ".join(IMAGE_PYTHON_SOURCES)
        raise BadRequest(
            f"build-image does not know how to render {stack.os}: it installs with {os_info.package_manager}",
            hint=f"images render for OSes that install with {known}",
        )
    for value in (os_info.codename, os_info.build_tools_repo):
        if value is not None and not _WORD.fullmatch(value):
            raise BadRequest(f"{stack.os}: {value!r} cannot go into a Dockerfile", hint="fix the knowledge base row")
    if stack.python_source.via == "deadsnakes" and os_info.codename is None:
        raise BadRequest(f"{stack.os} names no codename for the deadsnakes PPA", hint="fix the knowledge base row")
    if stack.python_source.via not in IMAGE_PYTHON_SOURCES[os_info.package_manager]:
        raise BadRequest(
            f"Python {stack.python} on {stack.os} comes via {stack.python_source.via}, which images do not support",
            hint="choose another --python",
        )
    return platform


def _check_options(stack: Stack, options: ImageOptions, platform: Platform) -> None:
    if options.flavor not in FLAVORS:
        raise BadRequest(f"unknown flavour {options.flavor!r}", hint=f"choose one of: {', '.join(FLAVORS)}")
    unsupported = platform.image.unsupported(stack, options)
    if unsupported is not None:
        raise unsupported.refuse()
    if options.slim and options.flavor == "devel":
        raise BadRequest(
            "--slim leaves the compilers out, but the devel flavour exists to compile extensions",
            hint="use --flavor runtime --slim, or --flavor devel without --slim",
        )
    for name in options.with_packages:
        if name not in COMPANIONS:
            raise BadRequest(f"unknown --with package {name!r}", hint=f"choose from: {', '.join(COMPANIONS)}, none")
        if getattr(stack, name) is None:
            raise BadRequest(
                f"{name} has no release for torch {stack.torch}",
                hint=f"leave {name} out of --with (it is in maintenance and has no release for this torch)",
            )
    variant = platform.image.variant(stack, options)
    if variant not in stack.base_images and options.base_image is None:
        raise BadRequest(f"the stack names no {variant} image", hint="give one with --base-image")
    if options.base_image is not None:
        validate.image_ref(options.base_image, "--base-image")
    if options.index_url is not None:
        validate.url(options.index_url, "--index-url")
    for requirement in (*options.pip, *options.gpuenv_requirements):
        validate.pip_requirement(requirement)


def _label_safe(value: str) -> None:
    if any(c in value for c in '"\\$`\n\r') or not value.isprintable():
        raise BadRequest(f"value {value[:40]!r} cannot go into an image label", hint="check the stack")


# --- the files ----------------------------------------------------------------------------------


def _torch_requirements(stack: Stack, options: ImageOptions) -> list[str]:
    lines = [f"torch=={stack.torch}"]
    lines += [f"{name}=={getattr(stack, name)}" for name in options.with_packages]
    return [*lines, stack.numpy]


def _lines(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def _notes(stack: Stack, options: ImageOptions, variant: str, platform: Platform) -> list[str]:
    notes = platform.image.notes(stack, options, variant)
    if stack.python_source.via == "deadsnakes":
        notes.append(f"Python {stack.python} from the deadsnakes PPA (key pinned by fingerprint)")
    return notes


def _pip_args(options: ImageOptions, index_url: str | None) -> str:
    if options.wheelhouse:
        source = ["--no-index", "--find-links", "/tmp/gpuenv/wheels"]
    else:
        source = ["--index-url", index_url] if index_url else []
    return " ".join(["--no-cache-dir", *source])


def _template_values(
    stack: Stack, options: ImageOptions, os_info: OsInfo, base: str, labels: dict[str, str], platform: Platform
) -> dict[str, object]:
    manager = os_info.package_manager
    packages = list(stack.python_source.packages)
    if options.slim:
        packages = [p for p in packages if not p.endswith(("-dev", "-devel"))]
    else:
        packages += COMPILERS[manager]
    if options.flavor == "devel":
        packages += ["ninja-build"]
    return {
        "stack": stack,
        "options": options,
        "software": platform.resolver.software(stack),
        "text": platform.image.text(stack, options),
        "base_image": base,
        "labels": labels,
        "package_manager": manager,
        "apt_packages": sorted(set(packages), key=packages.index),
        "extra_repo": os_info.build_tools_repo if options.flavor == "devel" else None,
        "deadsnakes": stack.python_source.via == "deadsnakes",
        "deadsnakes_fingerprint": DEADSNAKES_FINGERPRINT,
        "codename": os_info.codename or "",
        "torch_pip_args": _pip_args(options, options.index_url or stack.index_url),
        "extra_pip_args": _pip_args(options, None),
        "companions": [f"{name} {getattr(stack, name)}" for name in options.with_packages],
        "stack_in_image": STACK_IN_IMAGE,
    }


def _render(name: str, values: dict[str, object]) -> str:
    return jinja_env(shipped_dir("templates") / "docker").get_template(name).render(values)
