"""ROCm stacks built by hand from the Stack's contract (gpuenv/stack.py), for the image tests.

resolve learns ROCm elsewhere; rendering and certifying a ROCm image depend only on the Stack, so these
tests build the stacks they need themselves and do not wait on the knowledge base.
"""

from __future__ import annotations

from pathlib import Path

from gpuenv.stack import NONE, PythonSource, Stack

RUNTIME_BASE = "rocm/dev-ubuntu-24.04:6.4"
DEVEL_BASE = "rocm/dev-ubuntu-24.04:6.4-complete"
INDEX = "https://download.pytorch.org/whl/rocm6.4"


def rocm_stack(*, gpu_gfx: str | None = None, arch_list: str = "gfx90a;gfx942") -> Stack:
    """torch 2.9.1 on ROCm 6.4, Ubuntu 24.04's Python 3.12; with gpu_gfx, resolved for that GPU alone."""
    return Stack(
        torch="2.9.1",
        torchvision="0.24.1",
        torchaudio="2.9.1",
        cuda=NONE,
        platform="rocm",
        build="rocm6.4",
        cudnn=None,
        python="3.12",
        python_source=PythonSource(
            "system", ("python3.12", "python3.12-venv", "python3.12-dev"), "Ubuntu 24.04's own python3.12"
        ),
        os="ubuntu24.04",
        base_images={"runtime": RUNTIME_BASE, "devel": DEVEL_BASE},
        index_url=INDEX,
        numpy="numpy<3",
        driver_min=NONE,
        driver_floor=NONE,
        driver_branch="amdgpu-6.4",
        gpu_sm=None,
        arch_list=gpu_gfx or arch_list,
        base_image_eol=False,
        rocm="6.4",
        gpu_gfx=gpu_gfx,
    ).validate()


def mi300x_stack() -> Stack:
    """The stack `--gpu MI300X` resolves to: gfx942 alone."""
    return rocm_stack(gpu_gfx="gfx942")


def write_stack(stack: Stack, path: Path) -> Path:
    import json

    path.write_text(json.dumps(stack.to_dict(), indent=2) + "\n", encoding="utf-8")
    return path
