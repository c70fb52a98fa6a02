"""What a new user still tripped on when resolving, through the real CLI as they ran it: the driver branch of a
stack resolved for their driver, GPU names as nvidia-smi and amd-smi print them, uv's and pip's spellings of a
backend, and refusals that lead with the reason that matters."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from gpuenv.kb import load_kb
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
    assert text.startswith("gpuenv: error: no stack satisfies --python 3.8: --python 3.8: gpuenv stacks use Python ≥")
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


# --- GPU names as the vendors' tools print them ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "field", "value"),
    [
        ("Tesla V100-SXM2-32GB", "gpu_sm", "7.0"),  # nvidia-smi's and NVML's names
        ("Tesla P100-PCIE-16GB", "gpu_sm", "6.0"),
        ("NVIDIA A100-SXM4-80GB", "gpu_sm", "8.0"),
        ("NVIDIA H100 80GB HBM3", "gpu_sm", "9.0"),
        ("NVIDIA GeForce RTX 4090", "gpu_sm", "8.9"),
        ("9.0", "gpu_sm", "9.0"),  # nvidia-smi --query-gpu=compute_cap
        ("12.0", "gpu_sm", "12.0"),
        ("RTX5090", "gpu_sm", "12.0"),  # what completion offers
        ("AMD Instinct MI300X", "gpu_gfx", "gfx942"),  # amd-smi's market names
        ("AMD INSTINCT MI250X", "gpu_gfx", "gfx90a"),
        ("AMD Instinct MI250X/MI250", "gpu_gfx", "gfx90a"),  # pci.ids (740c) as amd-smi prints it
        ("Instinct MI210", "gpu_gfx", "gfx90a"),
    ],
)
def test_gpu_names_as_the_vendors_tools_print_them(name: str, field: str, value: str) -> None:
    assert _resolved("--gpu", name)[field] == value


def test_every_name_a_pci_row_gives_its_model_is_read_as_nvidia_smi_prints_it() -> None:
    """nvidia-smi prints pci.ids' model with dashes for spaces and the vendor's name before it."""
    kb = load_kb()
    for device in kb.pci_devices:
        model = device.name.partition("[")[2].rstrip("]")
        for spelled in (model, f"NVIDIA {model.replace(' ', '-')}", model.upper()):
            assert kb.gpu_named(spelled) is device.gpu, (spelled, device.name)
    for gpu in kb.models:
        assert kb.gpu_named(gpu.name.replace(" ", "")) is gpu
    assert kb.gpu_named("Quadro RTX 6000") is None  # a Turing card: no model's name is a prefix of its words
    assert kb.gpu_named("A10G") is None  # words, not letters: A10G is not the A10
    assert kb.gpu_named("NVIDIA H100 NVL") is kb.find_gpu("H100")


@pytest.mark.parametrize(
    ("name", "near"),
    [("MI300", "did you mean MI300X, MI300A"), ("H10", "did you mean H100, H20"), ("mi35", "MI355X")],
)
def test_an_unknown_gpu_is_told_the_nearest_models_of_either_vendor(name: str, near: str) -> None:
    text = _refusal("--gpu", name)
    assert text.startswith(f"gpuenv: error: unknown GPU {name!r}\n") and near in text
    assert "M40, M60" not in text  # not every NVIDIA model


def test_gpu_completion_offers_single_words_that_resolve() -> None:
    env = {"COMP_WORDS": "gpuenv resolve --gpu R", "COMP_CWORD": "3", "_GPUENV_COMPLETE": "bash_complete"}
    offered = [line.split(",", 1)[1] for line in run_gpuenv(env={**os.environ, **env}).stdout.splitlines()]
    assert "RTX5090" in offered and "RTXPRO6000" in offered
    assert all(" " not in word for word in offered)
    kb = load_kb()
    assert all(kb.gpu_named(word) is not None for word in offered)
    assert _resolved("--gpu", "RTX6000Ada")["gpu_sm"] == "8.9"


# --- uv's and pip's spellings: what a refusal and the help show ---------------------------------------


def test_a_bad_torch_backend_and_the_help_show_every_spelling() -> None:
    hint = _refusal("--torch-backend", "xpu").splitlines()[1]
    assert all(form in hint for form in ("cu124", "rocm6.4", "cpu", "auto (this machine)"))
    help_text = " ".join(run_gpuenv("resolve", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "--cuda TEXT CUDA release of torch's NVIDIA wheels: 12.4, 12.4.1, 12 (any 12.x) or cu124." in help_text
    assert "cpu, cu126, rocm6.4; auto: --driver auto" in help_text
