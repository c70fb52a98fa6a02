"""Every refusal names the constraint that failed; image-only facts constrain only image commands; resolve
shows the alternatives it passed over, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

from gpuenv.compat import load_kb
from gpuenv.resolve import Request
from gpuenv.resolve.service import resolve
from tests.conftest import run_gpuenv

KB = load_kb(None)


def test_an_image_refusal_names_the_missing_images_and_what_a_host_gets() -> None:
    done = run_gpuenv("resolve", "--torch", "2.4", "--os", "ubuntu24.04")
    assert done.returncode == 2
    message, hint = done.stderr.strip().splitlines()
    assert message.startswith("gpuenv: error: no stack satisfies --torch 2.4, --os ubuntu24.04: --os ubuntu24.04:")
    assert "nvidia/cuda has no ubuntu24.04 image for CUDA 11.8.0, 12.1.1, 12.4.1" in message
    assert "a host needs no image" in hint and "torch 2.4.1+cu121" in hint


def test_a_host_stack_needs_no_image() -> None:
    done = run_gpuenv("resolve", "--torch", "2.4", "--os", "ubuntu24.04", "--for", "host", "--json")
    assert done.returncode == 0, done.stderr
    stack = json.loads(done.stdout)
    assert (stack["torch"], stack["build"], stack["os"]) == ("2.4.1", "cu121", "ubuntu24.04")
    assert stack["base_images"] == {}  # so build-image --stack refuses it, and says why


def test_provision_is_not_blocked_by_a_missing_image(tmp_path: Path) -> None:
    done = run_gpuenv(
        "provision", "gpu01", "--torch", "2.4", "--os", "ubuntu24.04", "--render-only", str(tmp_path / "out")
    )
    assert done.returncode == 0, done.stderr
    assert '"torch": "2.4.1"' in (tmp_path / "out/group_vars/all/gpuenv.yml").read_text()


def test_build_image_is_still_refused_with_the_reason(tmp_path: Path) -> None:
    done = run_gpuenv("build-image", "--torch", "2.4", "--os", "ubuntu24.04", "--render-only", str(tmp_path))
    assert done.returncode == 2
    assert "nvidia/cuda has no ubuntu24.04 image" in done.stderr


def test_a_driver_refusal_names_the_driver() -> None:
    done = run_gpuenv("resolve", "--cuda", "12.4", "--driver", "470.82.01")
    assert done.returncode == 2
    assert "--driver 470.82.01: driver 470.82.01 is below" in done.stderr
    assert "not CUDA 12.4" not in done.stderr.splitlines()[0]  # releases without cu124 are not the news


def test_a_gpu_refusal_names_the_gpu() -> None:
    done = run_gpuenv("resolve", "--torch", "2.4", "--gpu", "B200")
    assert done.returncode == 2
    assert "--gpu B200: no kernel for Blackwell sm_100 in torch 2.4.0+cu118" in done.stderr


def test_resolve_shows_the_alternatives_it_passed_over_without_a_driver() -> None:
    done = run_gpuenv("resolve", "--torch", "2.4", "--json")
    rejected = json.loads(done.stdout)["rejected"]
    assert {"choice": "torch 2.4.1+cu118", "why": "usable, but cu121 is the build of torch's plain PyPI wheel"} in (
        rejected
    )
    text = run_gpuenv("resolve", "--torch", "2.4").stdout
    assert "  rejected torch 2.4.1+cu124: usable, but cu121 is the build of torch's plain PyPI wheel" in text


def test_releases_ruled_out_for_the_same_reason_are_one_range() -> None:
    stack = resolve(KB, Request(cuda="11.7", purpose="image"))
    choices = [r.choice for r in stack.rejected]
    assert choices[0] == "torch 2.1.0–2.3.1" and len(choices) <= 8


def test_the_image_purpose_is_not_a_constraint_the_user_gave() -> None:
    assert Request(torch="2.4", purpose="image").given() == {"torch": "2.4"}
