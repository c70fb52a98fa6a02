"""ROCm stacks: --rocm beside --cuda, an AMD --gpu implies ROCm, and every refusal names the constraint that failed."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from gpuenv import validate
from gpuenv.cli.stack_params import complete_gpu, complete_rocm
from gpuenv.errors import BadRequest
from gpuenv.kb import load_kb, parse_kb
from gpuenv.platforms.rocm.host import amd_gpu_by_pci_id
from gpuenv.platforms.rocm.oses import releases_named
from gpuenv.platforms.rocm.resolve import base_images
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from gpuenv.resources import data_file
from gpuenv.stack_service import load_stack
from tests.conftest import run_gpuenv

KB = load_kb(None)


def test_torch_2_9_1_on_rocm_6_4_comes_from_its_index_with_its_torchvision() -> None:
    stack = resolve(KB, Request(torch="2.9.1", rocm="6.4", os="ubuntu24.04", purpose="image")).validate()
    assert (stack.torch, stack.torchvision, stack.build, stack.rocm) == ("2.9.1", "0.24.1", "rocm6.4", "6.4")
    assert stack.index_url == "https://download.pytorch.org/whl/rocm6.4"
    assert (stack.platform, stack.cuda, stack.driver_min, stack.driver_floor) == ("rocm", "none", "none", "none")
    assert (stack.driver_branch, stack.cudnn, stack.gpu_sm, stack.gpu_gfx) == ("amdgpu-6.4", None, None, None)
    assert stack.base_images == {
        "runtime": "rocm/dev-ubuntu-24.04:6.4.4",
        "devel": "rocm/dev-ubuntu-24.04:6.4.4-complete",
    }
    assert "gfx942" in stack.arch_list.split(";") and "gfx950" not in stack.arch_list
    assert {"torch", "build", "rocm", "python", "os", "driver_branch", "arch_list"} <= set(stack.reasons)


def test_the_cli_resolves_it_and_the_json_stack_round_trips(tmp_path: Path) -> None:
    done = run_gpuenv("resolve", "--torch", "2.9.1", "--rocm", "6.4", "--os", "ubuntu24.04", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["index_url"], data["torchvision"]) == ("https://download.pytorch.org/whl/rocm6.4", "0.24.1")
    path = tmp_path / "stack.json"
    path.write_text(done.stdout)
    assert load_stack(path).to_dict() == data
    again = run_gpuenv("resolve", "--stack", str(path), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == data


@pytest.mark.parametrize("torch", [None, "2.10", "2.11"])
def test_an_mi355x_never_resolves_below_rocm_7(torch: str | None) -> None:
    stack = resolve(KB, Request(torch=torch, gpu="MI355X"))
    assert stack.rocm is not None and int(stack.rocm.split(".")[0]) >= 7
    assert (stack.gpu_gfx, stack.arch_list) == ("gfx950", "gfx950")


def test_an_mi355x_on_rocm_6_4_is_refused_naming_why() -> None:
    done = run_gpuenv("resolve", "--gpu", "MI355X", "--rocm", "6.4")
    assert done.returncode == 2
    message, hint = done.stderr.strip().splitlines()
    assert "--gpu MI355X: MI355X (gfx950) needs ROCm ≥ 7.0, and rocm6.4 is ROCm 6.4" in message
    assert "2.10.0+rocm7.0" in hint


def test_an_mi355x_is_refused_by_a_torch_without_rocm_7_builds() -> None:
    with pytest.raises(BadRequest, match=r"--gpu MI355X: MI355X \(gfx950\) needs ROCm ≥ 7.0"):
        resolve(KB, Request(torch="2.9.1", gpu="MI355X"))


def test_an_mi300x_names_gfx942_and_narrows_the_arch_list() -> None:
    stack = resolve(KB, Request(gpu="MI300X", rocm="6.4", os="ubuntu24.04")).validate()
    assert (stack.gpu_gfx, stack.arch_list, stack.build) == ("gfx942", "gfx942", "rocm6.4")
    assert "MI300X (gfx942)" in stack.reasons["gpu"]
    assert resolve(KB, Request(gpu="gfx942", rocm="6.4")).gpu_gfx == "gfx942"


def test_an_mi300x_needs_rocm_6_and_a_build_with_its_kernels() -> None:
    with pytest.raises(BadRequest, match=r"MI300X \(gfx942\) needs ROCm ≥ 6.0, and rocm5.7 is ROCm 5.7"):
        resolve(KB, Request(torch="2.2", gpu="MI300X"))
    assert resolve(KB, Request(torch="2.3", gpu="MI300X")).build == "rocm6.0"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--gpu", "MI300X", "--cuda", "12.4"), "--gpu MI300X is an AMD GPU (gfx942): it runs torch's ROCm builds"),
        (("--cuda", "12.4", "--rocm", "6.4"), "--cuda 12.4 and --rocm 6.4 exclude each other"),
        (("--gpu", "H100", "--rocm", "6.4"), "--gpu H100 is not an AMD GPU"),
        (("--rocm", "6.4", "--driver", "550"), "--driver 550 is an NVIDIA driver version"),
        (("--rocm", "5.0"), "unknown ROCm version 5.0"),
        (("--torch", "2.6.0+rocm6.4"), "torch 2.6.0 is built for"),
        (("--torch", "2.6.0+rocm6.2.4", "--cuda", "12.4"), "is a ROCm build, but --cuda 12.4 asks for CUDA"),
        (("--rocm", "7.0", "--os", "rockylinux8", "--for", "host"), "--os rockylinux8: AMD supports ROCm 7.0 on"),
        (("--rocm", "6.4", "--os", "rockylinux9"), "--os rockylinux9: no rocm/dev image of ROCm 6.4.4"),
    ],
)
def test_impossible_rocm_requests_exit_2_with_one_line_and_a_hint(args: tuple[str, ...], says: str) -> None:
    done = run_gpuenv("resolve", *args)
    assert done.returncode == 2, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[1].lstrip().startswith("hint:"), done.stderr
    assert says in lines[0], lines[0]


def test_rocky_linux_is_served_where_amd_lists_rhel_of_its_major_with_a_warning() -> None:
    stack = resolve(KB, Request(rocm="6.4", os="rockylinux9", purpose="host"))
    assert (stack.build, stack.os) == ("rocm6.4", "rockylinux9")
    assert "AMD lists ROCm 6.4 for RHEL 9, not rockylinux9" in " ".join(stack.warnings)
    assert stack.reasons["os"].endswith("AMD supports ROCm 6.4 on it as rhel9")
    on_ubuntu = resolve(KB, Request(rocm="6.4", os="ubuntu24.04", purpose="host"))
    assert not any("RHEL" in w for w in on_ubuntu.warnings) and on_ubuntu.reasons["os"].endswith("on it")
    with pytest.raises(BadRequest, match=r"AMD supports ROCm 7\.0 on .*rhel9.*, not rockylinux8"):
        resolve(KB, Request(rocm="7.0", os="rockylinux8", purpose="host"))
    done = run_gpuenv("resolve", "--rocm", "6.4", "--os", "rockylinux9")  # an image needs a rocm/dev base
    assert done.returncode == 2 and "a host needs no image: provision (and resolve --for host) gets" in done.stderr


def test_a_rocm_local_version_parses_and_picks_the_build() -> None:
    assert validate.torch_version("2.6.0+rocm6.2.4") == "2.6.0+rocm6.2.4"
    stack = resolve(KB, Request(torch="2.6.0+rocm6.2.4"))
    assert (stack.torch, stack.build, stack.rocm) == ("2.6.0", "rocm6.2.4", "6.2.4")
    assert resolve(KB, Request(torch="2.6.0", rocm="6.2.4")) == stack


def test_rocm_names_its_release_or_a_patch_of_it_but_6_2_4_is_its_own_build() -> None:
    assert [r.build for r in releases_named(KB, "6.2.4")] == ["rocm6.2.4"]
    assert [r.build for r in releases_named(KB, "6.2")] == ["rocm6.2"]
    assert [r.build for r in releases_named(KB, "6.4.1")] == ["rocm6.4"]
    assert [r.build for r in releases_named(KB, "rocm7.0")] == ["rocm7.0"]


def test_a_host_only_os_gets_no_image_and_an_os_amd_does_not_list_is_refused() -> None:
    host = resolve(KB, Request(rocm="6.4", os="debian12", purpose="host")).validate()
    assert host.base_images == {} and host.os == "debian12"
    with pytest.raises(BadRequest, match=r"--os ubuntu24\.04: AMD supports ROCm 6\.0 on .*, not ubuntu24\.04"):
        resolve(KB, Request(rocm="6.0", os="ubuntu24.04", purpose="host"))


def test_base_images_name_amds_dev_images() -> None:
    assert base_images(KB.rocm_by_build["rocm7.0"], KB.os_by_name["ubuntu22.04"]) == {
        "runtime": "rocm/dev-ubuntu-22.04:7.0.2",
        "devel": "rocm/dev-ubuntu-22.04:7.0.2-complete",
    }


def test_amd_pci_ids_name_their_gpus() -> None:
    found = amd_gpu_by_pci_id(KB, "1002:74A1")
    assert found is not None and (found.name, found.gfx) == ("MI300X", "gfx942")
    assert amd_gpu_by_pci_id(KB, "10de:74a1") is None


def test_every_amd_gpu_runs_some_rocm_build_from_its_first_rocm_on() -> None:
    for gpu in KB.amd_gpus:
        stack = resolve(KB, Request(gpu=gpu.name, purpose="host"))
        assert stack.gpu_gfx == gpu.gfx, gpu.name


def test_a_knowledge_base_without_rocm_tables_still_loads_and_refuses_rocm() -> None:
    raw = json.loads(data_file("compat.json").read_text())
    for table in ("rocm", "torch_rocm", "amd_gpus"):
        del raw[table]
    kb = parse_kb(raw)
    assert kb.rocm == () and resolve(kb, Request(torch="2.4")).build.startswith("cu")
    with pytest.raises(BadRequest, match=r"unknown ROCm version 6\.4"):
        resolve(kb, Request(rocm="6.4"))


def test_a_torch_rocm_row_naming_an_unknown_build_is_refused() -> None:
    raw = json.loads(data_file("compat.json").read_text())
    raw["torch_rocm"][0]["builds"] = {"rocm9.9": "gfx942"}
    with pytest.raises(ValueError, match=r"names build rocm9\.9, which no rocm row has"):
        parse_kb(raw)


def test_cuda_requests_are_untouched_by_rocm() -> None:
    for request in (Request(), Request(torch="2.4"), Request(gpu="H100"), Request(cuda="12.4", os="ubuntu22.04")):
        stack = resolve(KB, request)
        assert stack.platform == "cuda" and stack.rocm is None and stack.gpu_gfx is None


def test_build_image_and_provision_take_rocm_too() -> None:
    for command in ("build-image", "provision"):
        done = run_gpuenv(command, "--help")
        assert "--rocm" in done.stdout, command


def test_matrix_shows_the_rocm_releases_and_amd_gpus() -> None:
    done = run_gpuenv("matrix", "--rocm", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    rocm64 = next(row for row in data["rocm"] if row["build"] == "rocm6.4")
    assert (rocm64["images tag"], rocm64["torch"]) == ("6.4.4", "2.8.0–2.9.1")
    mi355x = next(row for row in data["amd_gpus"] if row["GPU"] == "MI355X")
    assert (mi355x["gfx"], mi355x["from ROCm"], mi355x["PCI ids (1002:)"]) == ("gfx950", "7.0", "75a3")
    assert mi355x["torch builds with its kernels"].startswith("2.10.0+rocm7.0")


def test_matrix_of_cuda_points_an_amd_gpu_at_the_rocm_tables() -> None:
    done = run_gpuenv("matrix", "--gpu", "MI300X")
    assert done.returncode == 2 and "gpuenv matrix --rocm" in done.stderr


def test_shell_completion_offers_amd_gpus_and_rocm_releases() -> None:
    ctx = click.Context(click.Command("resolve"))
    option = click.Option(["--gpu"])
    assert [item.value for item in complete_gpu(ctx, option, "MI3")] == [
        "MI300A",
        "MI300X",
        "MI308X",
        "MI325X",
        "MI350X",
        "MI355X",
    ]
    assert [item.value for item in complete_rocm(ctx, option, "6.2")] == ["6.2", "6.2.4"]
