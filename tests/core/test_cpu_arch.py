"""The CPU architecture as an axis of the knowledge base and the resolver: aarch64's own builds and GPU code,
GH200/GB200 implying aarch64, refusals that name the architecture, ROCm refused on aarch64 with the reason,
and `matrix --cpu-arch`. The facts checked here are the KB's aarch64 rows (docs/knowledge-base.md)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gpuenv.errors import BadRequest
from gpuenv.kb import load_kb, parse_kb
from gpuenv.kb.model import SchemaError
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from gpuenv.resources import data_file
from tests.conftest import run_gpuenv

KB = load_kb(None)
AARCH64 = KB.for_cpu_arch("aarch64")
RAW = json.loads(data_file("compat.json").read_text())


def _release(version: str) -> tuple[str, ...]:
    assert AARCH64 is not None
    return next(t for t in AARCH64.torch if t.version == version).builds


def test_every_release_says_what_it_publishes_for_aarch64_with_its_source() -> None:
    rows = {r["torch"]: r for r in RAW["torch_cpu_arch"]}
    assert set(rows) == {t.version for t in KB.torch}
    assert all(r["source"] and r["checked"] and r["cpu_arch"] == "aarch64" for r in rows.values())
    assert _release("2.3.1") == () and _release("2.6.0") == ("cu126",) and _release("2.7.0") == ("cu128",)
    assert _release("2.8.0") == ("cu129",)  # not cu128: the index's listing (sources disagree, the row says so)
    assert "cu128" in rows["2.8.0"]["note"] and "pytorch#160162" in rows["2.8.0"]["note"]
    assert rows["2.10.0"]["plain_build"] == "cpu" and rows["2.11.0"]["plain_build"] == "cu130"


def test_aarch64_builds_carry_their_own_gpu_code() -> None:
    assert AARCH64 is not None
    x86 = {t.version: t for t in KB.torch}
    arm = {t.version: t for t in AARCH64.torch}
    assert str(arm["2.9.1"].arch["cu126"]) == "8.0;9.0" and str(x86["2.9.1"].arch["cu126"]).startswith("5.0")
    assert "8.0" not in arm["2.7.0"].arch["cu128"].sass  # 2.7's aarch64 cu128 has no Ampere kernel
    assert "11.0" in arm["2.11.0"].arch["cu130"].sass and "11.0" not in x86["2.11.0"].arch["cu130"].sass


def test_gh200_and_gb200_resolve_aarch64_stacks_with_their_gpu_code() -> None:
    for gpu, sm in (("GH200", "9.0"), ("GB200", "10.0")):
        stack = resolve(KB, Request(gpu=gpu))
        assert stack.cpu_arch == "aarch64" and stack.gpu_sm == sm
        assert stack.build in _release(stack.torch)
        assert AARCH64 is not None
        code = next(t for t in AARCH64.torch if t.version == stack.torch).arch[stack.build]
        assert sm in code.sass
        assert not any("no wheel facts" in w for w in stack.warnings)


def test_gb200_never_gets_an_aarch64_build_without_blackwell_code() -> None:
    stack = resolve(KB, Request(gpu="GB200", torch="2.9"))
    assert stack.build != "cu126"  # the aarch64 cu126 build is sm_80/sm_90 only
    with pytest.raises(BadRequest, match="no kernel for Blackwell sm_100"):
        resolve(KB, Request(gpu="GB200", torch="2.6"))  # 2.6's aarch64 build is cu126, sm_90 only


@pytest.mark.parametrize("spelled", ["aarch64", "arm64", "ARM64"])
def test_arm64_is_aarch64(spelled: str) -> None:
    assert resolve(KB, Request(cpu_arch=spelled)).cpu_arch == "aarch64"


def test_x86_64_stacks_are_unchanged_by_the_axis() -> None:
    for spelled in (None, "x86_64", "amd64"):
        stack = resolve(KB, Request(torch="2.8", cpu_arch=spelled))
        assert stack.cpu_arch == "x86_64" and stack.build == "cu128"


def test_a_release_without_aarch64_wheels_is_refused_naming_the_architecture_and_the_releases() -> None:
    done = run_gpuenv("resolve", "--cpu-arch", "aarch64", "--torch", "2.3")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "publishes no CUDA wheels for aarch64" in done.stderr
    assert "CUDA wheels for aarch64 exist for torch 2.4.0–2.15.0" in done.stderr


def test_a_build_without_aarch64_wheels_is_refused_naming_where_it_exists() -> None:
    done = run_gpuenv("resolve", "--cpu-arch", "arm64", "--torch", "2.8", "--cuda", "12.8")
    assert done.returncode == 2
    assert "built for cu129 on aarch64, not CUDA 12.8" in done.stderr
    assert "cu128 exists for torch 2.7.0–2.7.1, 2.9.0–2.11.0 on aarch64" in done.stderr


@pytest.mark.parametrize("args", [["--rocm", "6.4"], ["--gpu", "MI300X"], ["--platform", "rocm"]])
def test_rocm_on_aarch64_is_refused_saying_why(args: list[str]) -> None:
    done = run_gpuenv("resolve", "--cpu-arch", "aarch64", *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "not aarch64: AMD ships ROCm" in done.stderr and "x86_64 only" in done.stderr


def test_a_gpu_of_an_aarch64_system_refuses_another_architecture() -> None:
    done = run_gpuenv("resolve", "--gpu", "GH200", "--cpu-arch", "x86_64")
    assert done.returncode == 2 and "every GH200 system's CPU is aarch64, not x86_64" in done.stderr


def test_an_unknown_architecture_is_a_bad_request_listing_the_spellings() -> None:
    done = run_gpuenv("resolve", "--cpu-arch", "sparc")
    assert done.returncode == 2 and "unknown CPU architecture 'sparc'" in done.stderr and "arm64" in done.stderr


def test_json_carries_the_architecture_and_text_names_it() -> None:
    done = run_gpuenv("resolve", "--gpu", "GH200", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["cpu_arch"] == "aarch64"
    text = run_gpuenv("resolve", "--cpu-arch", "aarch64", "--platform", "cpu")
    assert text.returncode == 0 and " aarch64\n" in text.stdout.splitlines(keepends=True)[0]


def test_matrix_shows_what_exists_for_aarch64() -> None:
    done = run_gpuenv("matrix", "--cpu-arch", "aarch64", "--json")
    assert done.returncode == 0
    found = json.loads(done.stdout)
    assert found["cpu_arch"] == "aarch64"
    builds = {t["torch"]: t["builds"] for t in found["torch"]}
    assert builds["2.8.0"] == ["cu129"] and "2.3.1" not in builds  # only what is published for aarch64
    cudnn = {c["cuda"]: c["cudnn_images"] for c in found["cuda"]}
    assert "rockylinux9" not in cudnn["12.2"]  # rockylinux9 cuDNN images are amd64 only
    assert json.loads(run_gpuenv("matrix", "--json").stdout)["cpu_arch"] == "x86_64"


def test_a_knowledge_base_without_aarch64_facts_still_resolves_and_says_so() -> None:
    raw = {k: v for k, v in RAW.items() if k not in ("torch_cpu_arch", "cuda_cpu_arch")}
    raw["gpus"] = [{k: v for k, v in g.items() if k != "cpu_arch"} for g in RAW["gpus"]]
    stack = resolve(parse_kb(raw), Request(cpu_arch="aarch64"))
    assert stack.cpu_arch == "aarch64" and any("no wheel facts for aarch64" in w for w in stack.warnings)


@pytest.mark.parametrize(
    ("table", "change"),
    [
        ("torch_cpu_arch", {"torch": "9.9.9"}),
        ("torch_cpu_arch", {"builds": {"cu999": "9.0"}}),
        ("torch_cpu_arch", {"cpu_arch": "x86_64"}),
        ("cuda_cpu_arch", {"cudnn_images": ["ubuntu99.04"]}),
    ],
)
def test_a_bad_architecture_row_is_a_schema_error(table: str, change: dict[str, object]) -> None:
    raw = {**RAW, table: [{**RAW[table][-1], **change}, *RAW[table][:-1]]}
    with pytest.raises(SchemaError):
        parse_kb(raw)


def test_the_kb_view_keeps_release_facts_and_replaces_build_facts() -> None:
    assert AARCH64 is not None
    x86 = next(t for t in KB.torch if t.version == "2.12.1")
    arm = next(t for t in AARCH64.torch if t.version == "2.12.1")
    assert (arm.torchvision, arm.python) == (x86.torchvision, x86.python)
    assert "build:cu129" not in arm.provenance.unconfirmed and "cu129" not in arm.builds
    assert replace(arm, provenance=x86.provenance).default_build == "cu130"
