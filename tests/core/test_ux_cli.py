"""The smaller rough edges of issue #29, through the real CLI: group options after the command, the
flag named for a bad value, "did you mean", --json against --format, the build-image help, fleet
verify's why column, fleet baseline learn's count of CPU-only reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuenv.cli.fleet_cmd import _why
from gpuenv.cli.output import shortened
from tests.conftest import run_gpuenv
from tests.fleet import fleet_reports as fr


@pytest.mark.parametrize(
    ("args", "option", "command"), [(("verify", "-q"), "-q", "verify"), (("resolve", "--debug"), "--debug", "resolve")]
)
def test_a_group_option_after_the_command_says_it_goes_before(args: tuple[str, ...], option: str, command: str) -> None:
    proc = run_gpuenv(*args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{option} is an option of gpuenv itself, not of {command}" in proc.stderr
    assert f"hint: put it before the command: gpuenv {option} {command}" in proc.stderr


def test_a_bad_value_names_the_flag_it_came_from_or_the_variable() -> None:
    flag = run_gpuenv("verify", "--level", "deeep")
    assert flag.returncode == 2 and "Invalid value for '--level':" in flag.stderr and "GPUENV_" not in flag.stderr
    env = run_gpuenv("verify", env={"GPUENV_VERIFY_LEVEL": "deeep"})
    assert env.returncode == 2 and "GPUENV_VERIFY_LEVEL" in env.stderr


def test_an_unknown_command_gets_the_nearest_one() -> None:
    proc = run_gpuenv("verfy")
    assert proc.returncode == 2
    assert "no such command 'verfy'" in proc.stderr and "did you mean: gpuenv verify" in proc.stderr
    far = run_gpuenv("zzzzzz")
    assert far.returncode == 2 and "gpuenv --help lists the commands" in far.stderr


def test_json_and_format_requirements_exclude_each_other() -> None:
    proc = run_gpuenv("resolve", "--json", "--format", "requirements")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert "--json and --format requirements exclude each other" in proc.stderr
    assert json.loads(run_gpuenv("resolve", "--json", "--format", "json").stdout)["schema"] == "gpuenv.stack/2"


def test_build_image_help_splits_no_word() -> None:
    text = run_gpuenv("build-image", "--help", env={"COLUMNS": "80"}).stdout
    tag_help = " ".join(text.split("--tag REF", 1)[1].split("[env")[0].split())
    assert "default: gpuenv/pytorch, tagged with the stack's torch, CUDA build, Python, OS and flavor" in tag_help


def test_the_why_column_cuts_at_a_word_with_an_ellipsis() -> None:
    message = "the nvml check found uncorrectable ECC errors on GPU 3 (GPU-0000 at 0000:48:00.0) " * 3
    why = _why("not certified", message)
    assert len(why) <= 100 and why.endswith("…") and message.startswith(why[:-1])
    assert message[len(why) - 1] == " "  # cut before a space, not inside a word
    assert shortened("short", 100) == "short"


def test_baseline_learn_counts_cpu_only_reports_apart(tmp_path: Path) -> None:
    folder = fr.write(fr.fleet(10, seed=3), tmp_path / "reports")
    for path in sorted(folder.glob("*.json"))[1:]:
        data = json.loads(path.read_text())
        data.update(device="cpu", cpu_only=True)
        path.write_text(json.dumps(data))
    proc = run_gpuenv("fleet", "baseline", "learn", str(folder), "-o", str(tmp_path / "b.json"))
    assert proc.returncode == 2, proc.stderr
    assert "(1 certified GPU report(s) of 10 (9 certified on CPU only))" in proc.stderr


def test_a_patch_release_of_a_known_cuda_minor_resolves_to_that_minor_and_says_so() -> None:
    asked = run_gpuenv("resolve", "--cuda", "12.4.0", "--json")
    assert asked.returncode == 0, asked.stderr
    stack = json.loads(asked.stdout)
    assert (stack["cuda"], stack["build"]) == ("12.4.1", "cu124")
    assert any("CUDA 12.4.0 asked: the stack uses 12.4.1" in w for w in stack["warnings"])
    unknown = run_gpuenv("resolve", "--cuda", "12.7.0")
    assert unknown.returncode == 2 and "unknown CUDA version 12.7.0" in unknown.stderr
