"""Grace systems in verify: the report's host names its CPU architecture, and GH200/GB200 have sourced expected
figures (an estimate warns, never fails; a confirmed figure can fail)."""

from __future__ import annotations

import os

import pytest

from gpuenv.verify.expectations import load_expectations
from gpuenv.verify.launch import host_identity


def test_the_report_host_names_the_cpu_architecture() -> None:
    found = host_identity()  # and the host's OS and Python, on a host (tests/fleet/test_compat_host.py)
    assert (found["hostname"], found["cpu_arch"]) == (os.uname().nodename, os.uname().machine)


@pytest.mark.parametrize(
    ("name", "model", "tflops", "confirmed"),
    [
        ("NVIDIA GH200 144G HBM3e", "GH200 144G HBM3e", 828.6, True),
        ("NVIDIA GH200 480GB", "GH200", 828.6, False),
        ("NVIDIA GB200", "GB200", 1822.0, True),
    ],
)
def test_grace_gpus_have_their_own_expected_figures(name: str, model: str, tflops: float, confirmed: bool) -> None:
    found = load_expectations().model(name)
    assert found is not None and found["model"] == model
    assert (found["matmul"]["tflops"], found["matmul"]["confirmed"]) == (tflops, confirmed)
    assert found["copy"]["confirmed"] is False  # every copy figure here is an estimate: it warns, never fails


def test_h200_and_b200_are_not_taken_for_their_grace_siblings() -> None:
    expectations = load_expectations()
    assert (expectations.model("NVIDIA H200") or {})["model"] == "H200 SXM"
    assert (expectations.model("NVIDIA B200") or {})["model"] == "B200"
