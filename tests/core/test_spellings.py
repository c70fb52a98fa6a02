"""Every spelling users bring for a backend, read by one parser (gpuenv.platforms.spelling), through the real CLI:
pip's and uv's build names, a CUDA release line, --platform, uv's --torch-backend, a +cpu torch."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_gpuenv


def _stack(*args: str) -> dict[str, object]:
    done = run_gpuenv("resolve", *args, "--json")
    assert done.returncode == 0, done.stderr
    stack: dict[str, object] = json.loads(done.stdout)
    return stack


def _refused(*args: str) -> tuple[str, str]:
    done = run_gpuenv("resolve", *args)
    assert done.returncode == 2 and not done.stdout, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[1].lstrip().startswith("hint:"), done.stderr
    return lines[0], lines[1]


@pytest.mark.parametrize(
    ("spelled", "as_"),
    [
        (("--cuda", "cu124"), ("--cuda", "12.4")),  # uv's --torch-backend names, pip's local versions
        (("--cuda", "CU124"), ("--cuda", "12.4")),
        (("--torch-backend", "cu124"), ("--cuda", "12.4")),
        (("--rocm", "rocm6.4"), ("--rocm", "6.4")),
        (("--torch-backend", "rocm6.4"), ("--rocm", "6.4")),
        (("--torch-backend", "cpu"), ("--platform", "cpu")),
        (("--torch", "2.5.1+cpu"), ("--torch", "2.5.1", "--platform", "cpu")),
    ],
)
def test_a_build_name_resolves_as_the_option_it_names(spelled: tuple[str, ...], as_: tuple[str, ...]) -> None:
    mine, theirs = _stack(*spelled), _stack(*as_)
    assert (mine["platform"], mine["build"], mine["torch"]) == (theirs["platform"], theirs["build"], theirs["torch"])


def test_cuda_12_is_a_release_line_like_torch_2_4() -> None:
    stack = _stack("--cuda", "12", "--torch", "2.4")
    assert str(stack["build"]).startswith("cu12") and str(stack["cuda"]).startswith("12.")
    assert _stack("--cuda", "11", "--torch", "2.4")["build"] == "cu118"
    text = run_gpuenv("matrix", "--cuda", "12", "--json")
    assert text.returncode == 0 and {row["cuda"].split(".")[0] for row in json.loads(text.stdout)["cuda"]} == {"12"}


@pytest.mark.parametrize("value", ["12.x", "cuda12", "1.2.3.4", "cu", "rocm6.4"])
def test_a_bad_cuda_is_exit_2_and_the_hint_shows_every_form(value: str) -> None:
    message, hint = _refused("--cuda", value)
    assert f"invalid CUDA version: {value!r}" in message
    assert all(form in hint for form in ("12.4", "12.4.1", "12 (a release line)", "cu124"))


def test_an_unknown_release_line_names_the_known_ones() -> None:
    message, hint = _refused("--cuda", "99")
    assert "unknown CUDA version 99" in message and "12.4" in hint and "cu124" in hint


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--platform", "cpu", "--cuda", "12.4"), "--platform cpu and --cuda 12.4 exclude each other"),
        (("--platform", "cuda", "--rocm", "6.4"), "--platform cuda and --rocm 6.4 exclude each other"),
        (("--platform", "cpu", "--gpu", "H100"), "--gpu H100: a CPU stack runs on no GPU"),
        (("--platform", "cpu", "--driver", "550"), "--driver 550: a CPU stack needs no GPU driver"),
        (("--torch", "2.5.1+cpu", "--cuda", "12.4"), "--torch 2.5.1+cpu is a CPU build, but --cuda 12.4 asks for CUDA"),
        (("--torch-backend", "cu126", "--cuda", "12.4"), "--torch-backend cu126 and --cuda both name the backend"),
        (("--torch-backend", "xpu"), "unknown torch backend 'xpu'"),
        (("--torch", "2.5.1+xpu"), "unknown build 'xpu' in torch version '2.5.1+xpu'"),
    ],
)
def test_spellings_that_contradict_or_name_nothing_are_exit_2(args: tuple[str, ...], says: str) -> None:
    message, _ = _refused(*args)
    assert says in message, message
