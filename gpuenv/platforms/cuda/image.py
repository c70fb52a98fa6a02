"""CUDA's image half: an image on NVIDIA's nvidia/cuda base (runtime, or cuDNN runtime/devel). Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuenv.platforms.base import ImageText
from gpuenv.platforms.node import Unsupported
from gpuenv.stack import Stack

if TYPE_CHECKING:  # only annotations: the options' modules import package metadata, off resolve's path
    from gpuenv.render.options import ImageOptions

CUDA_HOME = "/usr/local/cuda"  # where the nvidia/cuda devel images install the toolkit


class CudaImage:
    images: str = "nvidia/cuda"
    wheelhouse_needs: tuple[str, ...] = ()

    def variant(self, stack: Stack, options: ImageOptions) -> str:
        if options.flavor == "devel":
            return "cudnn-devel"
        return "cudnn-runtime" if options.cudnn else "runtime"

    def unsupported(self, stack: Stack, options: ImageOptions) -> Unsupported | None:
        return None

    def labels(self, stack: Stack, options: ImageOptions) -> dict[str, str]:
        in_image = options.cudnn or options.flavor == "devel"
        return {
            "cuda": stack.cuda,
            "build": stack.build,
            "cudnn": (stack.cudnn or "unknown") if in_image else "bundled-with-torch",
        }

    def host_labels(self, stack: Stack) -> dict[str, str]:
        return {
            "driver-min": stack.driver_min,
            "driver-floor": stack.driver_floor,
            "driver-branch": stack.driver_branch,
            "gpu-sm": stack.gpu_sm or "any",
        }

    def text(self, stack: Stack, options: ImageOptions) -> ImageText:
        header = [
            f"Needs an NVIDIA driver >= {stack.driver_min} "
            f"(>= {stack.driver_floor} through minor-version compatibility)."
        ]
        if options.flavor == "runtime" and not options.cudnn:
            header.append(
                "The base is the plain CUDA runtime image: the PyTorch wheels bundle their own cuDNN and NCCL."
            )
        devel = options.flavor == "devel"
        env = (
            (
                ("PATH", f"/opt/venv/bin:{CUDA_HOME}/bin:$PATH"),
                ("CUDA_HOME", CUDA_HOME),
                ("TORCH_CUDA_ARCH_LIST", f'"{stack.arch_list}"'),
            )
            if devel
            else (("PATH", "/opt/venv/bin:$PATH"),)
        )
        return ImageText(tuple(header), "the CUDA image plus Python (the CUDA images carry none)", None, env)

    def notes(self, stack: Stack, options: ImageOptions, variant: str) -> list[str]:
        notes = []
        if variant == "runtime":
            notes.append(
                "base is the plain CUDA runtime image: PyTorch wheels bundle their own cuDNN and NCCL "
                "(--cudnn picks the cuDNN image anyway)"
            )
        if options.flavor == "devel":
            notes.append(f"devel: nvcc on PATH, TORCH_CUDA_ARCH_LIST={stack.arch_list}")
        if options.slim:
            notes.append("slim: no C compiler or Python headers, so torch.compile cannot build kernels in this image")
        return notes
