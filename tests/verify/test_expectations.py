"""Absolute expectations per GPU model: device names matched to models, and the evaluation of
matmul, copy bandwidth and busbw against them (pure, with the package's table)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from gpuenv.resources import data_file
from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.checks.allreduce import judging
from gpuenv.verify.checks.allreduce.check import pair_plan
from gpuenv.verify.checks.allreduce.pairs import pairs_of
from gpuenv.verify.context import CheckContext
from gpuenv.verify.expectations import load_expectations, name_key
from gpuenv.verify.facts import GpuInfo, HostFacts
from gpuenv.verify.model import GpuRef
from gpuenv.verify.workloads import common, throughput

EXPECT = load_expectations()


@pytest.mark.parametrize(
    ("device_name", "model"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-PCIE-16GB", "V100 PCIe"),
        ("NVIDIA L40", None),  # not L4, not L40S
        ("NVIDIA GH200 480GB", "GH200"),  # its own row, not an H200
        ("NVIDIA GB200", "GB200"),  # its own row, not a B200
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_device_names_match_their_model(device_name: str, model: str | None) -> None:
    row = EXPECT.model(device_name)
    assert (row["model"] if row else None) == model


def test_names_are_normalised_as_the_kb_normalises_them() -> None:
    assert name_key("NVIDIA A100-SXM4-80GB") == "a100sxm480gb"
    assert name_key("Tesla V100-PCIE-16GB") == "v100pcie16gb"


# A Grace node holds what its tray holds: a GB200 compute tray 4 GPUs; GH200's NVL2/NVL32 busbw has no source yet.
GRACE_NODES: dict[str, set[int]] = {"GH200 144G HBM3e": set(), "GH200": set(), "GB200": {4}}


def test_every_model_has_a_sourced_figure_for_each_kind_and_count() -> None:
    data = json.loads(data_file("gpu-expectations.json").read_text())
    names = {m["model"] for m in data["models"]}
    assert {"A100 SXM 80GB", "A100 PCIe 40GB", "H100 SXM", "H100 PCIe", "H100 NVL", "H200 SXM", "H200 NVL"} <= names
    assert {"B200", "L40S", "L4", "V100 SXM2", "V100 PCIe"} <= names
    for m in data["models"]:
        assert m["matmul"]["source"] and m["copy"]["source"]
        assert {b["gpus"] for b in m["busbw"]} == GRACE_NODES.get(m["model"], {2, 4, 8}), m["model"]
        assert m["matmul"]["dtype"] == ("fp16" if m["model"].startswith("V100") else "bf16")


def host(gpus: int, name: str = "NVIDIA H100 80GB HBM3") -> CheckContext:
    infos = tuple(GpuInfo(i, i, name, f"GPU-{i}", None, None, "9.0") for i in range(gpus))
    return CheckContext("quick", "cuda", host=HostFacts(gpus=infos))


def amp_metrics(tflops: list[float], copy: list[float], shape: str = EXPECT.shape) -> dict[str, Any]:
    return {
        "matmul_dtype": "bf16",
        "matmul_tflops_by_shape": {shape: {str(i): v for i, v in enumerate(tflops)}},
        "copy_gbps": {str(i): v for i, v in enumerate(copy)},
    }


def amp_codes(tflops_share: float, copy_share: float = 1.0, name: str = "NVIDIA H100 80GB HBM3") -> set[str]:
    row = EXPECT.model(name)
    assert row is not None
    metrics = amp_metrics([row["matmul"]["tflops"] * tflops_share] * 8, [row["copy"]["gbps"] * copy_share] * 8)
    found = throughput.evaluate(metrics, host(8, name), name, expectations=EXPECT, baselines=load_baselines())
    return {f.code for f in found if f.code}


@pytest.mark.parametrize(
    ("share", "codes"),
    [(0.40, {"amp.tflops-below-model"}), (0.85, {"amp.tflops-under-model"}), (1.0, set())],
)
def test_every_gpu_judged_against_its_model_matmul_figure(share: float, codes: set[str]) -> None:
    assert amp_codes(share) == codes  # a whole node at 40 % fails: no peer to compare with is needed


@pytest.mark.parametrize(
    ("share", "codes"),
    [(0.40, {"amp.copy-bw-below-model"}), (0.85, {"amp.copy-bw-under-model"}), (1.0, set())],
)
def test_every_gpu_judged_against_its_model_copy_bandwidth(share: float, codes: set[str]) -> None:
    assert amp_codes(1.0, share) == codes


def test_an_estimated_figure_warns_but_never_fails() -> None:
    assert amp_codes(0.40, name="NVIDIA L40S") == {"amp.tflops-under-model"}


def test_an_unknown_model_or_another_shape_is_recorded_not_judged() -> None:
    codes = {
        f.code
        for f in throughput.evaluate(
            amp_metrics([1.0, 1.0], [1.0, 1.0]),
            host(2, "NVIDIA GeForce RTX 4090"),
            "NVIDIA GeForce RTX 4090",
            expectations=EXPECT,
            baselines=load_baselines(),
        )
    }
    assert codes == {"amp.no-tflops-baseline"}
    assert EXPECT.matmul("NVIDIA H100 80GB HBM3", "bf16", "4096x4096x4096") is None


def test_one_slow_gpu_among_eight_is_named_by_the_spread() -> None:
    row = EXPECT.model("NVIDIA H100 80GB HBM3")
    assert row is not None
    tflops = [row["matmul"]["tflops"]] * 8
    tflops[5] *= 0.6
    found = throughput.evaluate(
        amp_metrics(tflops, [row["copy"]["gbps"]] * 8),
        host(8),
        "NVIDIA H100 80GB HBM3",
        expectations=EXPECT,
        baselines=load_baselines(),
    )
    outliers = [f for f in found if f.code == "amp.tflops-outlier"]
    assert [f.gpu.index for f in outliers if f.gpu] == [5] and "GPU-5" in outliers[0].message


def busbw_codes(share: float, gpus: int = 8, name: str = "NVIDIA H100 80GB HBM3", device: str = "cuda") -> set[str]:
    expected = EXPECT.busbw(name, gpus)
    assert expected is not None
    nbytes = 1 << 30
    algbw = expected.value * share / (2 * (gpus - 1) / gpus)
    seconds = nbytes / (algbw * 1e9)
    results = [
        {
            "rank": r,
            "device": f"cuda:{r}",
            "errors": [],
            "skipped": {},
            "pairs": [],
            "times": {f"allreduce:{nbytes}": [seconds]},
        }
        for r in range(gpus)
    ]
    findings, _ = judging.evaluate(
        results,
        world=gpus,
        device=device,
        gpu_name=name,
        baselines=load_baselines(),
        refs=[GpuRef(r) for r in range(gpus)],
        expectations=EXPECT,
    )
    return {f.code for f in findings if f.code and f.code.startswith("allreduce.busbw")}


@pytest.mark.parametrize(
    ("share", "codes"),
    [(0.40, {"allreduce.busbw-below-model"}), (0.85, {"allreduce.busbw-under-model"}), (1.0, set())],
)
def test_busbw_judged_against_the_model_and_gpu_count(share: float, codes: set[str]) -> None:
    assert busbw_codes(share) == codes


def test_busbw_on_the_cpu_is_reported_not_judged() -> None:
    assert busbw_codes(0.01, device="cpu") == set()


def test_busbw_rows_exist_by_count_and_interconnect() -> None:
    sxm, pcie = EXPECT.busbw("NVIDIA H100 80GB HBM3", 8), EXPECT.busbw("NVIDIA H100 PCIe", 2)
    assert sxm is not None and sxm.value == 370 and sxm.confirmed and "nvswitch" in sxm.what
    assert pcie is not None and "pcie" in pcie.what  # unbridged is the lower figure: a missing bridge never fails
    assert EXPECT.busbw("NVIDIA H100 80GB HBM3", 3) is None


def pair_results(times: dict[tuple[int, int], float], world: int = 8) -> list[dict[str, Any]]:
    out = []
    for r in range(world):
        pairs = [{"pair": list(p), "wrong": 0, "time": t} for p, t in times.items() if r in p]
        out.append({"rank": r, "device": f"cuda:{r}", "errors": [], "skipped": {}, "pairs": pairs, "times": {}})
    return out


def test_one_pair_taking_four_times_the_others_time_is_named() -> None:
    times = {p: 1e-4 for p in itertools.combinations(range(8), 2)}
    times[(2, 6)] = 4e-4
    refs = [GpuRef(r, f"GPU-{r}") for r in range(8)]
    [found] = judging.slow_pairs(pair_results(times), refs, spread=EXPECT.spread)
    assert found.code == "allreduce.pair-slow" and found.severity == "warn"
    assert (
        "pair 2-6" in found.message
        and "4.0x" in found.message
        and "GPU-2" in found.message
        and "GPU-6" in found.message
    )


def test_a_slow_gpu_in_two_ring_pairs_is_the_suspect() -> None:
    times = {(i, (i + 1) % 8): 1e-4 for i in range(8)}
    times[(2, 3)] = times[(3, 4)] = 5e-4
    found = judging.slow_pairs(pair_results(times), [GpuRef(r, f"GPU-{r}") for r in range(8)], spread=EXPECT.spread)
    assert {f.gpu.index for f in found if f.gpu} == {3}


def test_pair_times_on_the_cpu_are_not_judged() -> None:
    times = {(i, (i + 1) % 4): 1e-4 for i in range(4)}
    times[(0, 1)] = 9e-4
    results = pair_results(times, world=4)
    for r in results:
        r["times"] = {"allreduce:1024": [1e-3]}
    findings, _ = judging.evaluate(
        results,
        world=4,
        device="cpu",
        gpu_name="cpu",
        baselines=load_baselines(),
        refs=[GpuRef(r) for r in range(4)],
        expectations=EXPECT,
    )
    assert not [f for f in findings if f.code == "allreduce.pair-slow"]
    cuda, _ = judging.evaluate(
        results,
        world=4,
        device="cuda",
        gpu_name="NVIDIA H100 80GB HBM3",
        baselines=load_baselines(),
        refs=[GpuRef(r) for r in range(4)],
        expectations=EXPECT,
    )
    assert [f for f in cuda if f.code == "allreduce.pair-slow"]


def test_pairs_are_ring_neighbours_at_quick_and_all_pairs_above() -> None:
    assert pairs_of(4, "ring") == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert len(pairs_of(8, "all")) == 28
    assert pair_plan("quick", 8, across_nodes=False) == {"bisect": True, "pairs": "ring"}
    assert pair_plan("standard", 8, across_nodes=False) == {"bisect": True, "pairs": "all"}
    assert pair_plan("standard", 2, across_nodes=False)["bisect"] is False
    assert pair_plan("standard", 16, across_nodes=True) == {"bisect": True, "pairs": "ring"}


def test_a_mixed_node_judges_each_gpu_against_its_own_model() -> None:
    """Four H100 and four A100 at their own models' figures: none is slow (judged against GPU 0's
    model, or against the node's median, the A100s would be); an A100 at 40 % of its own figure is."""
    h100, a100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
    names = [h100] * 4 + [a100] * 4
    rows = [EXPECT.model(n) for n in names]
    assert all(rows) and rows[0] != rows[4]
    infos = tuple(GpuInfo(i, i, n, f"GPU-{i}", None, None, None) for i, n in enumerate(names))
    ctx = CheckContext("quick", "cuda", host=HostFacts(gpus=infos))
    tflops = [r["matmul"]["tflops"] for r in rows]  # type: ignore[index]
    copy = [r["copy"]["gbps"] for r in rows]  # type: ignore[index]
    judge = {"expectations": EXPECT, "baselines": load_baselines()}
    assert common.gpu_model(ctx) == f"mixed: {a100}, {h100}"
    assert throughput.evaluate(amp_metrics(tflops, copy), ctx, common.gpu_model(ctx), **judge) == []
    tflops[6] *= 0.4
    found = throughput.evaluate(amp_metrics(tflops, copy), ctx, common.gpu_model(ctx), **judge)
    assert {(f.code, f.gpu.index if f.gpu else None) for f in found} == {
        ("amp.tflops-below-model", 6),
        ("amp.tflops-outlier", 6),
    }
    assert all("A100" in f.message for f in found if f.code == "amp.tflops-below-model")
