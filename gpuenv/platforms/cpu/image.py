"""CPU's image half: an image on the OS's own base image, with torch's CPU build. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuenv.platforms.base import ImageText
from gpuenv.platforms.node import Unsupported
from gpuenv.stack import Stack

if TYPE_CHECKING:  # only annotations: the options' modules import package metadata, off resolve's path
    from gpuenv.render.options import ImageOptions


class CpuImage:
    images: str = "container"
    wheelhouse_needs: tuple[str, ...] = ()

    def variant(self, stack: Stack, options: ImageOptions) -> str:
        return options.flavor  # the OS image serves both: devel adds the compilers itself

    def unsupported(self, stack: Stack, options: ImageOptions) -> Unsupported | None:
        if options.cudnn:
            return Unsupported("--cudnn picks NVIDIA's cuDNN image, which a CPU stack has no use for", "drop --cudnn")
        return None

    def labels(self, stack: Stack, options: ImageOptions) -> dict[str, str]:
        return {"build": stack.build}

    def host_labels(self, stack: Stack) -> dict[str, str]:
        return {}

    def text(self, stack: Stack, options: ImageOptions) -> ImageText:
        header = ("Needs no GPU and no GPU driver on the host: torch's CPU build runs on the CPU alone.",)
        python_base = f"the {stack.os} image plus Python {stack.python} and its venv module"
        return ImageText(header, python_base, None, (("PATH", "/opt/venv/bin:$PATH"),))

    def notes(self, stack: Stack, options: ImageOptions, variant: str) -> list[str]:
        notes = [f"base is {stack.os}'s own image: torch's CPU build needs no GPU software"]
        if options.flavor == "devel":
            notes.append("devel: a C and C++ compiler and ninja for extensions (no GPU compiler)")
        if options.slim:
            notes.append("slim: no C compiler or Python headers, so torch.compile cannot build kernels in this image")
        return notes
