"""The NVIDIA rows learned after the snapshot (CUDA 13.3, the Rocky Linux images of 11.6.2, 13.1 and 13.2,
the cuDNN inside the 13.1 and 13.2 images, R610) as resolve and the driver rules read them."""

from __future__ import annotations

import pytest

from gpuenv.errors import BadRequest
from gpuenv.kb import driver_runs_cuda, load_kb, recommended_branch
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from tests.conftest import run_gpuenv


def test_cuda_13_3_is_known_but_no_torch_release_is_built_for_it() -> None:
    result = run_gpuenv("resolve", "--cuda", "13.3")
    assert result.returncode == 2
    assert "unknown CUDA version" not in result.stderr
    assert "no torch release is built for CUDA 13.3" in result.stderr


def test_the_default_stack_does_not_move_to_the_newest_cuda_row() -> None:
    stack = resolve(load_kb(), Request())
    assert (stack.torch, stack.build) == ("2.14.1", "cu130")


@pytest.mark.parametrize(
    ("driver", "mode"),
    [("610.43.02", "native"), ("595.71.05", "minor-version"), ("580.65.06", "minor-version"), ("575.57.08", "no")],
)
def test_cuda_13_3_drivers(driver: str, mode: str) -> None:
    assert driver_runs_cuda(load_kb(), driver, "13.3").mode == mode


def test_cuda_13_3_needs_the_r610_branch() -> None:
    kb = load_kb()
    cuda = kb.find_cuda("13.3")
    assert cuda is not None and cuda.toolkit == "13.3.1" and cuda.bundled_driver == "610.43.02"
    assert recommended_branch(kb, cuda).branch == "R610"


def test_cuda_11_6_on_rocky_linux_8_is_refused_for_python_not_for_the_image() -> None:
    with pytest.raises(BadRequest) as refused:
        resolve(load_kb(), Request(cuda="11.6", os="rockylinux8", purpose="image"))
    assert "no rockylinux8 image" not in str(refused.value)
    assert "Python" in str(refused.value)


@pytest.mark.parametrize(("cuda", "cudnn"), [("13.1", "9.17.1.4"), ("13.2", "9.20.0.48")])
def test_the_cudnn_inside_the_13_1_and_13_2_images(cuda: str, cudnn: str) -> None:
    row = load_kb().find_cuda(cuda)
    assert row is not None and row.cudnn == cudnn and {"rockylinux8", "rockylinux9"} <= set(row.images)
