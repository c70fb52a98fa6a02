"""The per-model expectations for AMD Instinct GPUs: the names AMD SMI and torch on ROCm give
match their model, and an MI300X is judged as an H100 is (a whole node at 40 % fails, at 85 %
warns, at 100 % passes) against its own sourced figures."""

from __future__ import annotations

import pytest

from gpuenv.verify.expectations import load_expectations, name_key
from tests.verify.test_expectations import amp_codes, busbw_codes

EXPECT = load_expectations()
MI300X = "AMD Instinct MI300X"  # AMD SMI's market name (the fake library's too) and torch's device name


@pytest.mark.parametrize(
    ("device_name", "model"),
    [
        (MI300X, "MI300X"),
        ("AMD Instinct MI300X VF", "MI300X"),  # a virtual function (SR-IOV) in a VM
        ("MI300X-O", "MI300X"),
        ("AMD Instinct MI325X", "MI325X"),
        ("AMD Instinct MI250X", "MI250X"),
        ("AMD Instinct MI300A", None),  # the APU: not an MI300X
        ("AMD Instinct MI250", None),  # fewer CUs than the MI250X: no figure of its own yet
        ("AMD Instinct MI355X", None),
    ],
)
def test_amd_names_match_their_model(device_name: str, model: str | None) -> None:
    row = EXPECT.model(device_name)
    assert (row["model"] if row else None) == model


def test_the_amd_instinct_prefix_is_dropped_as_nvidias_is() -> None:
    assert name_key("AMD Instinct MI300X") == name_key("MI300X") == "mi300x"
    assert name_key("NVIDIA H100 80GB HBM3") == "h10080gbhbm3"  # NVIDIA names keep their key


@pytest.mark.parametrize(
    ("share", "codes"),
    [(0.40, {"amp.tflops-below-model"}), (0.85, {"amp.tflops-under-model"}), (1.0, set())],
)
def test_an_mi300x_matmul_is_judged_against_its_measured_figure(share: float, codes: set[str]) -> None:
    assert amp_codes(share, name=MI300X) == codes


@pytest.mark.parametrize(
    ("share", "codes"),
    [(0.40, {"amp.copy-bw-below-model"}), (0.85, {"amp.copy-bw-under-model"}), (1.0, set())],
)
def test_an_mi300x_copy_bandwidth_is_judged_against_its_measured_figure(share: float, codes: set[str]) -> None:
    assert amp_codes(1.0, share, name=MI300X) == codes


def test_the_figures_are_the_measured_ones_not_the_datasheet_peaks() -> None:
    matmul, copy = EXPECT.matmul(MI300X, "bf16", EXPECT.shape), EXPECT.copy(MI300X)
    assert matmul is not None and matmul.value == 668.4 and matmul.confirmed and "MAMF" in matmul.source
    assert copy is not None and copy.value < 5300 * 0.85 and copy.confirmed  # 5.3 TB/s is never reached
    mi325x = EXPECT.matmul("AMD Instinct MI325X", "bf16", EXPECT.shape)
    assert mi325x is not None and mi325x.value == 784.9 and mi325x.confirmed


def test_an_mi250x_is_judged_per_gcd_and_only_warns() -> None:
    """torch and AMD SMI show each of its two GCDs as a GPU: half the package's 383 TFLOP/s at most."""
    matmul = EXPECT.matmul("AMD Instinct MI250X", "bf16", EXPECT.shape)
    assert matmul is not None and matmul.value < 383 / 2 and not matmul.confirmed
    assert amp_codes(0.40, name="AMD Instinct MI250X") == {"amp.tflops-under-model"}


def test_rccl_busbw_is_judged_over_xgmi_by_gpu_count_as_an_estimate() -> None:
    eight = EXPECT.busbw(MI300X, 8)
    assert eight is not None and "xgmi" in eight.what and not eight.confirmed
    assert busbw_codes(0.40, name=MI300X) == {"allreduce.busbw-under-model"}  # an estimate warns, never fails
    assert busbw_codes(1.0, name=MI300X) == set()
    two, four = EXPECT.busbw(MI300X, 2), EXPECT.busbw(MI300X, 4)
    assert two is not None and four is not None and two.value < four.value < eight.value  # links a GPU drives
