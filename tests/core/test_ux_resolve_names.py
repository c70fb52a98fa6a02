"""What a new user still tripped on when resolving, through the real CLI as they ran it: the driver branch of a
stack resolved for their driver, GPU names as nvidia-smi and amd-smi print them, uv's and pip's spellings of a
backend, and refusals that lead with the reason that matters."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import run_gpuenv


def _resolved(*args: str) -> dict:  # type: ignore[type-arg]
    proc = run_gpuenv("resolve", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def _refusal(*args: str) -> str:
    proc = run_gpuenv("resolve", *args)
    assert proc.returncode == 2 and not proc.stdout, proc.stderr
    return proc.stderr


# --- a stack resolved for a driver keeps its branch -------------------------------------------------


def test_a_stack_resolved_for_a_driver_keeps_its_branch_and_provision_installs_it(tmp_path: Path) -> None:
    stack = _resolved("--torch", "2.5", "--gpu", "H100", "--driver", "535")
    assert stack["driver_branch"] == "R535"
    assert stack["reasons"]["driver_branch"].startswith("the branch of driver 535, which the stack was resolved for")
    assert "--driver-branch" in stack["reasons"]["driver_branch"]
    assert _resolved("--driver", "550.54.15")["driver_branch"] == "R550"
    assert _resolved("--torch", "2.5", "--gpu", "H100")["driver_branch"] == "R580"  # no driver: the recommended one
    stack_file = tmp_path / "stack.json"
    stack_file.write_text(json.dumps(stack))
    for i, (extra, branch) in enumerate([((), "535"), (("--driver-branch", "R580"), "580")]):
        project = tmp_path / f"p{i}"
        proc = run_gpuenv("provision", "h1", "--stack", str(stack_file), *extra, "--render-only", str(project))
        assert proc.returncode == 0, proc.stderr
        variables = yaml.safe_load((project / "group_vars" / "all" / "gpuenv.yml").read_text())
        assert variables["nvidia_driver_branch"] == branch


# --- refusals lead with the reason that matters -----------------------------------------------------


def test_a_refusal_leads_with_the_option_the_user_gave_and_its_commonest_reason() -> None:
    text = _refusal("--python", "3.8")
    assert text.startswith("gpuenv: error: no stack satisfies --python 3.8: --python 3.8: gpuenv stacks use Python ≥ 3.10;")
    assert "more)" in text.splitlines()[0]  # the other reasons stay counted
    # what the default OS's images ruled out comes after what the user asked for
    assert text.index("--python 3.8: gpuenv stacks") < text.index("--os ubuntu22.04: nvidia/cuda has no")


def test_a_gpu_refusal_names_the_builds_by_the_code_they_carry() -> None:
    line = _refusal("--gpu", "B200", "--torch", "2.4").splitlines()[0]
    assert line.endswith(
        "--gpu B200: no kernel for Blackwell sm_100 in torch 2.4.0+cu118, 2.4.1+cu118 (GPU code sm_37…sm_90)"
        " or 2.4.0+cu121, 2.4.0+cu124, 2.4.1+cu121, 2.4.1+cu124 (GPU code sm_50…sm_90)"
    )
    assert "its GPU code is" not in line
    long = _refusal("--gpu", "B200", "--cuda", "11.8").splitlines()[0]
    assert long.endswith("in torch 2.0.0+cu118 … 2.7.1+cu118 (17 builds, GPU code sm_37…sm_90)")


def test_rocm_refusals_group_releases_into_ranges_as_cudas_do() -> None:
    line = _refusal("--rocm", "5.7", "--torch", "2.9").splitlines()[0]
    assert line.endswith("--rocm 5.7: torch 2.9.0–2.9.1 is built for rocm6.3, rocm6.4")
    line = _refusal("--rocm", "6.4", "--torch", "2.4").splitlines()[0]
    assert line.endswith("--rocm 6.4: torch 2.4.0–2.4.1 is built for rocm6.0, rocm6.1")
