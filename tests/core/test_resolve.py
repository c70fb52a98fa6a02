"""The resolver: the scenarios users rely on, impossible requests, and properties over all inputs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuenv.errors import BadRequest
from gpuenv.kb import V, driver_runs_cuda, gpu_code_for, load_kb
from gpuenv.resolve import Request
from gpuenv.resolve.ranking import fit_for_default
from gpuenv.resolve.request import python_problem as _python_problem
from gpuenv.resolve.service import resolve

KB = load_kb()


def test_default_stack_is_the_newest_settled_release_and_pins_torchaudio() -> None:
    stack = resolve(KB, Request())
    newest_known = max(KB.torch, key=lambda t: V(t.version))
    assert newest_known.version == "2.15.0" and stack.torch != "2.15.0"  # known, but not settled
    assert (stack.torch, stack.build, stack.torchvision, stack.torchaudio) == (
        "2.14.1",
        "cu130",
        "0.29.1",
        "2.11.1",
    )
    assert "newest settled release" in stack.reasons["torch"]


def test_exact_versions_and_local_versions() -> None:
    assert resolve(KB, Request(torch="2.4.0")).torch == "2.4.0"
    local = resolve(KB, Request(torch="2.4.0+cu121"))
    assert (local.torch, local.build, local.torchvision) == ("2.4.0", "cu121", "0.19.0")
    assert resolve(KB, Request(torch="2.4")).torch == "2.4.1"
    with pytest.raises(BadRequest, match=r"names build cu121, but --cuda asks for 12\.4"):
        resolve(KB, Request(torch="2.4.0+cu121", cuda="12.4"))
    with pytest.raises(BadRequest, match="unknown CUDA build cu999"):
        resolve(KB, Request(torch="2.4.0+cu999"))


def test_a_release_without_torchvision_is_a_stack_with_a_warning() -> None:
    stack = resolve(KB, Request(torch="2.15.0"))
    assert (stack.torch, stack.build, stack.torchvision) == ("2.15.0", "cu132", None)
    assert any("torchvision has no release for torch 2.15.0" in w for w in stack.warnings)
    assert any("torch 2.15.0 builds" in w for w in stack.warnings)  # its build list is unconfirmed


def test_cuda_126_needs_the_driver_of_its_newest_patch() -> None:
    stack = resolve(KB, Request(cuda="12.6"))
    assert (stack.cuda, stack.driver_min) == ("12.6.3", "560.35.05")


def test_volta_is_refused_builds_without_its_code_and_told_what_works() -> None:
    with pytest.raises(BadRequest) as err:
        resolve(KB, Request(torch="2.7", gpu="V100", cuda="12.8"))
    hint = err.value.hint or ""
    assert "without --cuda: torch 2.7.1+cu126" in hint
    assert "for V100 (sm_70), torch 2.7 is built as 2.7.0+cu118, 2.7.0+cu126, 2.7.1+cu118, 2.7.1+cu126" in hint
    # torch 2.8 put sm_70 back into its cu128 build (pytorch/pytorch#157517)
    assert resolve(KB, Request(torch="2.8", gpu="V100", cuda="12.8")).build == "cu128"


def test_same_major_cubins_and_ptx() -> None:
    ada = resolve(KB, Request(torch="1.13", gpu="L4"))  # sm_89 runs the sm_86 cubins of CUDA 11.6/11.7 builds
    assert ada.build in ("cu116", "cu117") and "SASS" in ada.reasons["gpu"]
    hopper = resolve(KB, Request(torch="2.0.0", gpu="H100"))  # sm_90 was in 2.0.0's cu118 build
    assert hopper.build == "cu118"
    with pytest.raises(BadRequest):
        resolve(KB, Request(torch="1.13", gpu="H100"))  # sm_90 does not run sm_86 cubins
    assert resolve(KB, Request(gpu="B300", torch="2.7")).build == "cu128"  # sm_103 runs sm_100 cubins
    assert resolve(KB, Request(gpu="P100")).build == "cu126"  # only cu126 still carries Pascal


def test_experimental_python_is_never_picked() -> None:
    # torch 2.5 has cp313 wheels (experimental, pytorch/pytorch#130249), torchvision 0.20 has none
    release = next(t for t in KB.torch if t.version == "2.5.1")
    assert "3.13" in release.python and release.python_experimental == ("3.13",)
    for torch, python in (("2.5", "3.13"), ("1.13", "3.11")):
        with pytest.raises(BadRequest, match=f"no stack satisfies --torch {torch}, --python {python}"):
            resolve(KB, Request(torch=torch, python=python))
    assert "experimental" in _python_problem(release, KB.os_by_name["ubuntu22.04"], "3.13")


def test_seed_scenario_cuda_117() -> None:
    stack = resolve(KB, Request(cuda="11.7"))
    assert (stack.torch, stack.build, stack.cuda) == ("2.0.1", "cu117", "11.7.1")
    assert stack.index_url == "https://download.pytorch.org/whl/cu117"
    assert stack.base_images["runtime"].startswith("nvidia/cuda:11.7.1-runtime-ubuntu")
    assert stack.base_images["cudnn-runtime"] == "nvidia/cuda:11.7.1-cudnn8-runtime-ubuntu22.04"
    assert stack.base_image_eol and any("end-of-life" in w for w in stack.warnings)


def test_seed_image_on_ubuntu_2004() -> None:
    stack = resolve(KB, Request(cuda="11.7", os="ubuntu20.04"))
    assert stack.base_images["cudnn-runtime"] == "nvidia/cuda:11.7.1-cudnn8-runtime-ubuntu20.04"
    assert stack.python_source.via == "deadsnakes"


def test_old_driver_never_gets_cuda_12() -> None:
    stack = resolve(KB, Request(driver="470.82.01"))
    assert stack.cuda.startswith("11.")
    assert any("minor-version" in w for w in stack.warnings)


def test_driver_535_gets_newest_stack_it_runs() -> None:
    stack = resolve(KB, Request(driver="535.104.05"))
    newest = max((t for t in KB.torch if fit_for_default(t, "cu126")), key=lambda t: V(t.version))
    assert stack.torch == newest.version and stack.build == "cu126"
    assert driver_runs_cuda(KB, "535.104.05", stack.build).ok


def test_gpu_constraints() -> None:
    assert not resolve(KB, Request(gpu="V100")).build.startswith("cu13")
    assert V(resolve(KB, Request(gpu="B200", cuda="12.8")).torch) >= V("2.7")
    with pytest.raises(BadRequest):
        resolve(KB, Request(gpu="B200", torch="2.5"))
    assert resolve(KB, Request(gpu="sm_120")).gpu_sm == "12.0"
    assert resolve(KB, Request(gpu="h100")).arch_list == "9.0"


def test_impossible_request_names_nearest_choices() -> None:
    with pytest.raises(BadRequest) as err:
        resolve(KB, Request(torch="1.13", cuda="12.4"))
    assert "torch 1.13 is built for cu116, cu117" in (err.value.hint or "")
    # corrected data: every patch release is known, so cu124 starts at 2.4.0
    assert "cu124 exists for torch 2.4.0–2.6.0" in (err.value.hint or "")


@pytest.mark.parametrize(
    "request_",
    [Request(cuda="99.1"), Request(torch="0.4"), Request(gpu="Voodoo5"), Request(os="windows11"), Request(gpu="sm_42")],
)
def test_unknown_values_are_bad_requests(request_: Request) -> None:
    with pytest.raises(BadRequest, match="unknown"):
        resolve(KB, request_)


def test_host_only_os_has_no_images() -> None:
    stack = resolve(KB, Request(os="debian12"))
    assert stack.base_images == {} and stack.python == "3.11" and stack.python_source.via == "system"


def test_rocky_uses_appstream_python() -> None:
    stack = resolve(KB, Request(os="rockylinux9", torch="2.4"))
    assert stack.python == "3.11" and stack.python_source.via == "appstream"


def test_stack_json_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from gpuenv.stack_service import load_stack

    stack = resolve(KB, Request(cuda="12.4", gpu="A100"))
    path = tmp_path / "stack.json"
    path.write_text(json.dumps(stack.to_dict()))
    assert load_stack(path) == stack


torch_versions = st.sampled_from(
    [
        None,
        *[t.version for t in KB.torch],
        "2.4",
        "2.0",
        "2.7",
        *[f"{t.version}+{b}" for t in KB.torch for b in t.builds],
    ]
)
cuda_versions = st.sampled_from([None, *[c.version for c in KB.cuda]])
drivers = st.sampled_from([None, "470.82.01", "525.60.13", "535.104.05", "550.54.15", "570.124.06", "580.65.06", "595"])
pythons = st.sampled_from([None, "3.10", "3.11", "3.12", "3.13"])
gpus = st.sampled_from([None, *[g.name for g in KB.gpus], *["sm_" + a.sm.replace(".", "") for a in KB.architectures]])
oses = st.sampled_from([None, *[o.name for o in KB.os]])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    torch=torch_versions, cuda=cuda_versions, driver=drivers, python=pythons, gpu=gpus, os=oses,
    purpose=st.sampled_from(["image", "host"]),
)  # fmt: skip
def test_any_resolved_stack_satisfies_every_constraint(torch, cuda, driver, python, gpu, os, purpose) -> None:  # type: ignore[no-untyped-def]
    request = Request(torch=torch, cuda=cuda, driver=driver, python=python, gpu=gpu, os=os, purpose=purpose)
    try:
        stack = resolve(KB, request)
    except BadRequest as exc:
        assert exc.hint  # an impossible request always says what would work
        return
    release = next(t for t in KB.torch if t.version == stack.torch)
    cuda_row = KB.cuda_by_build[stack.build]
    assert stack.build in release.builds  # never a build absent from that release
    assert stack.python in release.python and V(stack.python) >= V("3.10")
    assert stack.python not in release.python_experimental
    if torch:
        version, _, build = torch.partition("+")
        assert stack.torch == version or stack.torch.startswith(version + ".")
        assert not build or stack.build == build
    if cuda:
        assert cuda_row.version == cuda
    if driver:
        assert driver_runs_cuda(KB, driver, stack.build).ok
    if python:
        assert stack.python == python
    if os:
        assert stack.os == os
    if gpu:
        sm = f"{gpu[3:-1]}.{gpu[-1]}" if gpu.startswith("sm_") else KB.find_gpu(gpu).sm  # type: ignore[union-attr]
        # the GPU runs the build's own SASS (same major, minor at least the cubin's) or PTX it can JIT
        assert gpu_code_for(release.arch[stack.build], sm) is not None
    image_os = "image" in KB.os_by_name[stack.os].roles and stack.os in cuda_row.images
    assert bool(stack.base_images) == image_os
    assert image_os or purpose == "host" or "image" not in KB.os_by_name[stack.os].roles  # a host needs no image
    if image_os:
        assert all(stack.cuda in ref and ref.endswith(stack.os) for ref in stack.base_images.values())
