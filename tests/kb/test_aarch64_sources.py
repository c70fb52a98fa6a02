"""The knowledge base's aarch64 facts against what was read upstream, written down here apart from the KB
(tests/data/kb-snapshot is generated from the KB, so it cannot check it). Each fact names where it was read."""

from __future__ import annotations

import pytest

from gpuenv.kb import load_kb

ARM = load_kb().for_cpu_arch("aarch64")

# PyPI's plain aarch64 wheels, read by HTTP range: torch/version.py and the CUDA_ARCH_FLAGS compiled into
# torch/lib/libtorch_python.so (SASS only; "+PTX" could not be read there).
PYPI_AARCH64 = {
    "2.10.0": ("cpu", None),  # 2.10.0+cpu, torch.version.cuda None
    "2.11.0": ("cu130", "8.0 9.0 10.0 11.0 12.0"),  # 2.11.0+cu130: sm_80 sm_90 sm_100 sm_110 sm_120
    "2.12.0": ("cu130", "8.0 9.0 10.0 11.0 12.0"),
    "2.13.0": ("cu130", "8.0 9.0 10.0 11.0 12.0"),
    "2.14.1": ("cu130", "8.0 9.0 10.0 11.0 12.0"),
    "2.15.0": ("cu132", "8.0 9.0 10.0 11.0 12.0"),  # 2.15.0+cu132
}
# download.pytorch.org listings quoted upstream (uv#13195, uv#10843, OpenRAL#88, sglang#8772), and the
# release matrices' CUDA_AARCH64_ARCHES (pytorch/test-infra history).
INDEX_AARCH64 = {
    "2.3.1": (),  # nightly-only before 2.4 (pytorch/builder#1856)
    "2.5.1": ("cu124",),
    "2.6.0": ("cu126",),
    "2.7.0": ("cu128",),  # test-infra#6492: "We release 12.8 aarch"
    "2.8.0": ("cu129",),  # the cu128 index lists 2.8.0 for manylinux_2_28_x86_64 and win_amd64 only
    "2.9.1": ("cu126", "cu128", "cu130"),  # pytorch#162364
}
MEASURED = {("2.9.1", "cu128"): "8.0 9.0 10.0 12.0"}  # OpenRAL#167: get_arch_list() on an aarch64 host


@pytest.mark.parametrize(("version", "wheel"), PYPI_AARCH64.items())
def test_the_plain_pypi_wheel_matches_what_pypi_serves(version: str, wheel: tuple[str, str | None]) -> None:
    assert ARM is not None
    release = next(t for t in ARM.torch if t.version == version)
    build, sass = wheel
    assert release.default_build == build
    if sass is not None:
        assert " ".join(release.arch[build].sass) == sass


@pytest.mark.parametrize(("version", "builds"), INDEX_AARCH64.items())
def test_the_builds_match_the_index_listings(version: str, builds: tuple[str, ...]) -> None:
    assert ARM is not None
    assert next(t for t in ARM.torch if t.version == version).builds == builds


def test_a_measured_arch_list_matches() -> None:
    assert ARM is not None
    for (version, build), sass in MEASURED.items():
        assert " ".join(next(t for t in ARM.torch if t.version == version).arch[build].sass) == sass
