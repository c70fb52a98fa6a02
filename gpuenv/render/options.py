"""What a user chose for an image beyond the Stack: flavour, cuDNN, companions, mirrors, extras."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuenv.requirements import gpuenv_requirements

DEFAULT_WITH = ("torchvision",)


@dataclass(frozen=True)
class ImageOptions:
    """What the user chose beyond the Stack (all already validated by the CLI; checked again here)."""

    flavor: str = "runtime"
    cudnn: bool = False
    with_packages: tuple[str, ...] = DEFAULT_WITH
    slim: bool = False
    base_image: str | None = None  # overrides the stack's image (a mirror, a digest-pinned ref)
    index_url: str | None = None  # a mirror of the stack's wheel index
    wheelhouse: bool = False  # wheels are copied into the context: install with --no-index
    pip: tuple[str, ...] = ()
    app: bool = False
    app_requirements: bool = False
    # installed beside gpuenv's wheel (which goes in with --no-deps); from gpuenv's package metadata
    gpuenv_requirements: tuple[str, ...] = field(default_factory=gpuenv_requirements)
