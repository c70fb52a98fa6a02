"""CUDA forward compatibility (NVIDIA's cuda-compat package): the rule swept over every GPU model, driver branch and
CUDA release of the knowledge base, and resolve's refusal that names it."""

from __future__ import annotations

import json

import pytest

from gpuenv.errors import BadRequest
from gpuenv.kb import driver_runs_cuda, forward_compat, in_cuda_image, load_kb, parse_kb
from gpuenv.resolve.request import Request
from gpuenv.resolve.service import resolve
from gpuenv.resources import data_file

KB = load_kb(None)
DRIVERS = [b.latest for b in KB.driver_branches if b.latest]


def test_the_rule_over_every_gpu_driver_branch_and_cuda_release() -> None:
    seen = {"compat": 0, "no": 0, "not-needed": 0}
    for gpu in KB.gpus:
        for driver in DRIVERS:
            branch = f"R{driver.split('.')[0]}"
            for cuda in KB.cuda:
                got = forward_compat(KB, cuda.version, driver, gpu)
                seen[got.mode] += 1
                assert got.package == f"cuda-compat-{cuda.version.replace('.', '-')}"
                if driver_runs_cuda(KB, driver, cuda.version).mode == "native":
                    assert got.mode == "not-needed", (gpu.name, driver, cuda.version)
                elif not gpu.datacenter:  # GeForce and RTX workstation cards never
                    assert got.mode == "no" and "data center GPUs only" in got.message, (gpu.name, driver)
                elif branch not in (cuda.forward_compat or ()):  # an end-of-life or unlisted branch never
                    assert got.mode == "no" and f"does not serve {branch}" in got.message, (gpu.name, driver)
                else:
                    assert got.mode == "compat" and got.package in got.message and branch in got.message
    assert all(seen.values()), seen


@pytest.mark.parametrize(
    ("gpu", "driver", "cuda", "mode"),
    [
        ("H100", "535.104.05", "13.0", "compat"),  # cross-major, R535 listed for cuda-compat-13-0
        ("H100", "535.104.05", "12.8", "compat"),  # same major, lifting minor-version compatibility's PTX JIT limit
        ("H100", "550.54.15", "12.8", "no"),  # R550 is end of life: not a target
        ("A100", "470.256.02", "12.8", "no"),  # R470 too, though the image's NVIDIA_REQUIRE_CUDA admits it
        ("RTX 4090", "535.104.05", "12.8", "no"),  # a GeForce, never
        ("RTX 6000 Ada", "535.104.05", "13.0", "no"),  # an RTX workstation card, never
        ("H100", "570.124.06", "12.8", "not-needed"),
    ],
)
def test_examples(gpu: str, driver: str, cuda: str, mode: str) -> None:
    assert forward_compat(KB, cuda, driver, KB.find_gpu(gpu)).mode == mode


def test_in_an_nvidia_cuda_image_compat_is_a_caveat_a_geforce_does_not_run_and_native_is_the_drivers() -> None:
    caveat = in_cuda_image(forward_compat(KB, "12.8", "535.104.05", KB.find_gpu("H100")))
    assert caveat is not None and caveat[0] == "caveat" and "cuda-compat-12-8" in caveat[1]
    refused = in_cuda_image(forward_compat(KB, "12.8", "535.104.05", KB.find_gpu("RTX 4090")))
    assert refused is not None and refused[0] == "no" and "error 804" in refused[1]
    assert in_cuda_image(forward_compat(KB, "12.8", "570.124.06", KB.find_gpu("RTX 4090"))) is None
    assert in_cuda_image(forward_compat(KB, "12.8", "550.54.15", KB.find_gpu("H100"))) is None  # the driver decides


def test_an_unknown_gpu_model_never_gets_it() -> None:
    assert forward_compat(KB, "13.0", "535.104.05", None).mode == "no"


def test_resolve_says_cuda_compat_in_its_refusal_without_picking_the_build() -> None:
    with pytest.raises(BadRequest) as refused:
        resolve(KB, Request(torch="2.9.0+cu130", gpu="H100", driver="535.104.05"))
    assert "below 580.65.06" in refused.value.message
    assert "cuda-compat-13-0 runs CUDA 13.0.3 on R535 on the data center H100" in refused.value.message
    with pytest.raises(BadRequest) as consumer:
        resolve(KB, Request(torch="2.9.0+cu130", gpu="RTX 4090", driver="535.104.05"))
    assert "cuda-compat" not in consumer.value.message
    picked = resolve(KB, Request(torch="2.9.0", gpu="H100", driver="535.104.05"))
    assert picked.build != "cu130"  # said, never chosen
    assert any(r.why.endswith("installed or in an nvidia/cuda image") for r in picked.rejected if "cu130" in r.choice)


def test_resolve_names_the_package_beside_minor_version_compatibility_on_a_data_center_gpu_only() -> None:
    h100 = resolve(KB, Request(torch="2.7.0+cu128", gpu="H100", driver="535.104.05"))
    assert any("minor-version" in w and "cuda-compat-12-8" in w for w in h100.warnings)
    rtx = resolve(KB, Request(torch="2.7.0+cu128", gpu="RTX 4090", driver="535.104.05"))
    assert not any("cuda-compat" in w for w in rtx.warnings)


def test_an_image_for_a_geforce_on_an_older_driver_is_refused_by_resolve_as_by_fleet_compat() -> None:
    """The same rule (in_cuda_image) in resolve for an image: its nvidia/cuda base's cuda-compat would be loaded."""
    asked = Request(torch="2.7.0+cu128", gpu="RTX 4090", driver="535.104.05", purpose="image")
    with pytest.raises(BadRequest) as refused:
        resolve(KB, asked)
    assert "cuda-compat-12-8" in refused.value.message and "error 804" in refused.value.message
    assert "resolve --for host" in (refused.value.hint or "")  # a host install runs it: said in the hint
    on_host = resolve(KB, Request(torch="2.7.0+cu128", gpu="RTX 4090", driver="535.104.05", purpose="host"))
    assert any("minor-version" in w for w in on_host.warnings)
    picked = resolve(KB, Request(torch="2.7.0", gpu="RTX 4090", driver="535.104.05", purpose="image"))
    assert driver_runs_cuda(KB, "535.104.05", picked.build).mode == "native"
    h100 = resolve(KB, Request(torch="2.7.0+cu128", gpu="H100", driver="535.104.05", purpose="image"))  # control
    assert h100.build == "cu128" and any("cuda-compat-12-8" in w for w in h100.warnings)
    native = resolve(KB, Request(torch="2.7.0+cu128", gpu="RTX 4090", driver="570.124.06", purpose="image"))
    assert native.build == "cu128" and not any("cuda-compat" in w for w in native.warnings)


def test_the_resolve_json_refusal(capsys) -> None:
    from tests.conftest import gpuenv_main

    code = gpuenv_main("resolve", "--torch", "2.9.0", "--gpu", "H100", "--driver", "535.104.05", "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["build"] != "cu130"
    assert any("cuda-compat-13-0" in r["why"] for r in doc["rejected"])


def test_older_knowledge_bases_load_and_serve_no_branch() -> None:
    raw = json.loads(data_file("compat.json").read_text())
    for row in raw["cuda"]:
        row.pop("forward_compat")
    for row in raw["gpus"]:
        row.pop("datacenter")
    old = parse_kb(raw)
    assert forward_compat(old, "13.0", "535.104.05", old.find_gpu("H100")).mode == "no"


@pytest.mark.parametrize(
    ("table", "field", "value", "said"),
    [
        ("cuda", "forward_compat", ["535"], "list of driver branches"),
        ("cuda", "forward_compat", ["R999"], "not a known branch below"),
        ("gpus", "datacenter", "yes", "true or false"),
    ],
)
def test_a_malformed_fact_is_refused(table: str, field: str, value: object, said: str) -> None:
    from gpuenv.kb import SchemaError

    raw = json.loads(data_file("compat.json").read_text())
    raw[table][-1][field] = value
    with pytest.raises(SchemaError, match=said):
        parse_kb(raw)


def test_what_is_unconfirmed_is_said() -> None:
    h20 = forward_compat(KB, "13.0", "535.104.05", KB.find_gpu("H20"))
    assert h20.mode == "compat" and "unconfirmed: the H20 being a data center GPU" in h20.message
    h100 = forward_compat(KB, "12.8", "535.104.05", KB.find_gpu("H100"))
    assert "unconfirmed" not in h100.message
    unread = in_cuda_image(forward_compat(KB, "13.0", "535.104.05", KB.find_gpu("H100")))  # 13.0's images: not read
    read = in_cuda_image(forward_compat(KB, "12.8", "535.104.05", KB.find_gpu("H100")))
    assert unread and "unconfirmed: its NVIDIA_REQUIRE_CUDA" in unread[1]
    assert read and "unconfirmed" not in read[1]
