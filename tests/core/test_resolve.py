"""The resolver: the scenarios users rely on, impossible requests, and properties over all inputs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuenv.compat import V, driver_runs_cuda, load_kb, sm_in_range
from gpuenv.errors import BadRequest
from gpuenv.resolve import Request, resolve

KB = load_kb()


def test_seed_scenario_cuda_117() -> None:
    stack = resolve(KB, Request(cuda="11.7"))
    assert (stack.torch, stack.cuda_build, stack.cuda) == ("2.0.1", "cu117", "11.7.1")
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
    newest = max(KB.torch, key=lambda t: V(t.version))
    assert stack.torch == newest.version
    assert driver_runs_cuda(KB, "535.104.05", stack.cuda_build).ok


def test_gpu_constraints() -> None:
    assert not resolve(KB, Request(gpu="V100")).cuda_build.startswith("cu13")
    assert V(resolve(KB, Request(gpu="B200", cuda="12.8")).torch) >= V("2.7")
    with pytest.raises(BadRequest):
        resolve(KB, Request(gpu="B200", torch="2.5"))
    assert resolve(KB, Request(gpu="sm_120")).gpu_sm == "12.0"
    assert resolve(KB, Request(gpu="h100")).arch_list == "9.0"


def test_impossible_request_names_nearest_choices() -> None:
    with pytest.raises(BadRequest) as err:
        resolve(KB, Request(torch="1.13", cuda="12.4"))
    assert "torch 1.13 is built for cu116, cu117" in (err.value.hint or "")
    assert "cu124 exists for torch 2.4.1–2.6.0" in (err.value.hint or "")


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

    from gpuenv.stack import load_stack

    stack = resolve(KB, Request(cuda="12.4", gpu="A100"))
    path = tmp_path / "stack.json"
    path.write_text(json.dumps(stack.to_dict()))
    assert load_stack(path) == stack


torch_versions = st.sampled_from([None, *[t.version for t in KB.torch], "2.4", "2.0"])
cuda_versions = st.sampled_from([None, *[c.version for c in KB.cuda]])
drivers = st.sampled_from([None, "470.82.01", "525.60.13", "535.104.05", "550.54.15", "570.124.06", "580.65.06", "595"])
pythons = st.sampled_from([None, "3.10", "3.11", "3.12", "3.13"])
gpus = st.sampled_from([None, *[g.name for g in KB.gpus]])
oses = st.sampled_from([None, *[o.name for o in KB.os]])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(torch=torch_versions, cuda=cuda_versions, driver=drivers, python=pythons, gpu=gpus, os=oses)
def test_any_resolved_stack_satisfies_every_constraint(torch, cuda, driver, python, gpu, os) -> None:  # type: ignore[no-untyped-def]
    request = Request(torch=torch, cuda=cuda, driver=driver, python=python, gpu=gpu, os=os)
    try:
        stack = resolve(KB, request)
    except BadRequest as exc:
        assert exc.hint  # an impossible request always says what would work
        return
    release = next(t for t in KB.torch if t.version == stack.torch)
    cuda_row = KB.cuda_by_build[stack.cuda_build]
    assert stack.cuda_build in release.builds
    assert stack.python in release.python and V(stack.python) >= V("3.10")
    if torch:
        assert stack.torch == torch or stack.torch.startswith(torch + ".")
    if cuda:
        assert cuda_row.version == cuda
    if driver:
        assert driver_runs_cuda(KB, driver, stack.cuda_build).ok
    if python:
        assert stack.python == python
    if os:
        assert stack.os == os
    if gpu:
        arch = KB.arch(KB.find_gpu(gpu).sm)  # type: ignore[union-attr]
        assert arch is not None
        if cuda_row.wheel_sm:
            assert sm_in_range(arch.sm, cuda_row.wheel_sm)
        if arch.min_torch:
            assert V(stack.torch) >= V(arch.min_torch)
    image_os = "image" in KB.os_by_name[stack.os].roles
    assert bool(stack.base_images) == image_os
    if image_os:
        assert all(stack.cuda in ref and ref.endswith(stack.os) for ref in stack.base_images.values())
