"""ROCm's image half: an image on AMD's rocm/dev-* base (the complete one for devel). Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuenv.platforms.base import ImageText
from gpuenv.platforms.node import Unsupported
from gpuenv.stack import Stack

if TYPE_CHECKING:  # only annotations: the options' modules import package metadata, off resolve's path
    from gpuenv.render.options import ImageOptions

ROCM_HOME = "/opt/rocm"  # where AMD's rocm/dev images install ROCm


class RocmImage:
    images: str = "ROCm (rocm/dev)"
    # What the ROCm torch wheels depend on from their own index (not PyPI), so a wheelhouse must hold it.
    wheelhouse_needs: tuple[str, ...] = ("pytorch-triton-rocm",)

    def variant(self, stack: Stack, options: ImageOptions) -> str:
        return options.flavor  # one base image per flavour

    def unsupported(self, stack: Stack, options: ImageOptions) -> Unsupported | None:
        if options.cudnn:
            return Unsupported(
                "--cudnn picks NVIDIA's cuDNN image, which a ROCm stack has no use for",
                "drop --cudnn: ROCm images come as --flavor runtime or devel (MIOpen ships in the torch wheels)",
            )
        return None

    def labels(self, stack: Stack, options: ImageOptions) -> dict[str, str]:
        return {"rocm": str(stack.rocm), "build": stack.build}

    def host_labels(self, stack: Stack) -> dict[str, str]:
        return {"driver-branch": stack.driver_branch, "gpu-gfx": stack.gpu_gfx or "any"}

    def text(self, stack: Stack, options: ImageOptions) -> ImageText:
        header = [
            f"Needs AMD's amdgpu kernel driver on the host ({stack.driver_branch}); run it with",
            "--device=/dev/kfd --device=/dev/dri --group-add video (and the group owning /dev/kfd, often render).",
        ]
        if options.flavor == "runtime":
            header += [
                "The base is AMD's ROCm dev image: the PyTorch wheels bundle ROCm's math libraries and RCCL, and the",
                "base adds the HIP runtime, rocminfo and AMD SMI, which gpuenv verify reads.",
            ]
        env = (
            (
                ("PATH", f"/opt/venv/bin:{ROCM_HOME}/bin:$PATH"),
                ("ROCM_HOME", ROCM_HOME),
                ("ROCM_PATH", ROCM_HOME),
                ("PYTORCH_ROCM_ARCH", f'"{stack.arch_list}"'),
            )
            if options.flavor == "devel"
            else (("PATH", "/opt/venv/bin:$PATH"),)
        )
        python_base = f"the ROCm image plus Python {stack.python} and its venv module"
        pip_note = "The ROCm wheels depend on pytorch-triton-rocm, which pip takes from the same index."
        return ImageText(tuple(header), python_base, pip_note, env)

    def notes(self, stack: Stack, options: ImageOptions, variant: str) -> list[str]:
        if options.flavor == "devel":
            notes = [f"devel: AMD's complete ROCm image, hipcc on PATH, PYTORCH_ROCM_ARCH={stack.arch_list}"]
        else:
            notes = [
                f"base is AMD's ROCm {stack.rocm} dev image: the PyTorch wheels bundle ROCm's math libraries and RCCL, "
                "the base adds the HIP runtime, rocminfo and AMD SMI that gpuenv verify reads"
            ]
        if options.slim:
            notes.append("slim: gpuenv adds no C compiler or Python headers (AMD's rocm/dev base carries its own)")
        return notes
