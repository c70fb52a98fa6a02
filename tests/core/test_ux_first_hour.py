"""What a new user still tripped on in their first hour, through the real CLI as they ran it: settings
shown on any machine, one error format with nothing on stdout before a refusal, `--passive` alone,
one failure for one cause, a log's compact output, a help with an example and exit codes everywhere,
`tune power` without a GPU, and the extra a missing library comes with."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pytest

from gpuenv.cli import cli
from gpuenv.verify.pci import TEST_SYSFS_ENV
from tests.conftest import run_gpuenv
from tests.verify.conftest import shadow_torch


@pytest.fixture
def gpu_less(tmp_path: Path) -> dict[str, str]:
    """A machine without a GPU, whatever this one has: an empty PCI bus, no NVML library."""
    (tmp_path / "empty-bus").mkdir()
    return {TEST_SYSFS_ENV: str(tmp_path / "empty-bus"), "LD_LIBRARY_PATH": "", "ROCM_PATH": str(tmp_path)}


# --- config show never looks at the disk --------------------------------------------------------


@pytest.mark.parametrize("args", [("config", "show"), ("config", "show", "slurm"), ("config", "show", "--json")])
def test_config_show_never_checks_that_a_folder_a_setting_names_exists(tmp_path: Path, args: tuple[str, ...]) -> None:
    """`slurm install --dest` defaults to /etc/slurm, which exists wherever Slurm is installed (as in CI):
    the test sets that default to a folder that does not exist, from the environment and from a file."""
    missing = tmp_path / "no-such-folder"
    config = tmp_path / "gpuenv.toml"
    config.write_text(f'[slurm.prolog]\nreports-dir = "{missing}"\n[verify]\nreport = "{missing}/r.json"\n')
    env = {"GPUENV_SLURM_INSTALL_DEST": str(missing), "GPUENV_FLEET_REPORT_PROMETHEUS": str(missing / "f.prom")}
    proc = run_gpuenv("--config", str(config), *args, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(str(missing)) >= (2 if "slurm" in args else 3) and proc.stderr == ""
    if "--json" in args:
        dest = next(s for s in json.loads(proc.stdout)["settings"] if s["command"] == "slurm install")
        assert (dest["value"], dest["source"]) == (str(missing), "env")
    assert not missing.exists()
    refused = run_gpuenv("slurm", "install", env=env)  # the command itself still refuses it
    assert refused.returncode == 2 and "--dest" in refused.stderr and str(missing) in refused.stderr
    assert refused.stdout == ""


# --- one error format, nothing on stdout before a refusal -----------------------------------------


@pytest.mark.parametrize(
    ("args", "message", "hint"),
    [
        (("verify", "--level", "fast"), "Invalid value for '--level': 'fast' is not one of", "gpuenv verify --help"),
        (("verify", "--check", "nvlm"), "Invalid value for '--check': 'nvlm'", "gpuenv verify --help"),
        (("verify", "--chek", "nvml"), "No such option '--chek'", "did you mean one of: '--check'"),
        (("fleet", "report"), "Missing argument 'paths'", "usage: gpuenv fleet report [OPTIONS] PATHS..."),
        (("version",), "no such command 'version'", "did you mean: gpuenv --version"),
    ],
)
def test_every_usage_error_is_gpuenvs_one_line_and_hint(args: tuple[str, ...], message: str, hint: str) -> None:
    proc = run_gpuenv(*args)
    assert (proc.returncode, proc.stdout) == (2, "")
    first, second = proc.stderr.splitlines()
    assert first.startswith("gpuenv: error: ") and message in first
    assert second.startswith("  hint: ") and hint in second
    assert "Usage:" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_refused_gpu_selection_prints_nothing_on_stdout(gpu_less: dict[str, str]) -> None:
    proc = run_gpuenv("verify", "--gpus", "3", env=gpu_less)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.startswith("gpuenv: error: --gpus 3: no such GPU on this node")


# --- --passive alone ------------------------------------------------------------------------------


def test_passive_alone_is_the_passive_nvml_check(gpu_less: dict[str, str]) -> None:
    proc = run_gpuenv("verify", "--passive", "--json", env=gpu_less)
    report = json.loads(proc.stdout)
    assert [c["name"] for c in report["checks"]] == ["nvml"] and report["options"]["checks"] == ["nvml"]
    # exit 3 on a machine without a GPU: nothing could run, which the help says
    assert proc.returncode == 3 and report["verdict"]["summary"] == "no check could run (CPU only) (1 skip)"
    help_text = " ".join(run_gpuenv("verify", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "3 could not run: no check could (every one skipped, e.g. --check nvml --passive" in help_text
    assert "implies --check nvml" in help_text


# --- one cause, one failure; a log's compact form --------------------------------------------------


def test_a_run_on_the_gpus_without_one_fails_once_and_skips_every_check_naming_why(
    gpu_less: dict[str, str],
) -> None:
    proc = run_gpuenv("verify", "--device", "cuda", "--report", "-", env=gpu_less)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    failed = [c for c in report["checks"] if c["status"] != "skip"]
    assert [(c["name"], c["status"]) for c in failed] == [("verify", "fail")]
    assert [f["code"] for f in failed[0]["findings"]] == ["verify.no-gpu"]
    assert failed[0]["summary"].startswith("--device cuda, but this node has no GPU: none on the PCI bus")
    skipped = {c["name"]: c["summary"] for c in report["checks"] if c["status"] == "skip"}
    assert set(skipped) == {"nvml", "stack", "allreduce", "amp", "profiler"}
    assert set(skipped.values()) == {"not run: no GPU on this node (--device cuda)"}
    # the fix offered works here: it names no command that needs the GPU this machine lacks
    fix = failed[0]["findings"][0]["remediation"]
    assert "gpuenv verify --device cpu" in fix and "--driver auto" not in fix
    # the CPU stack it names resolves here (its workloads, verify --device cpu, run in tests/verify's cpu tests)
    assert "install the CPU stack (gpuenv resolve --platform cpu)" in fix
    cpu_stack = run_gpuenv("resolve", "--platform", "cpu", "--json", env=gpu_less)
    assert cpu_stack.returncode == 0 and json.loads(cpu_stack.stdout)["platform"] == "cpu", cpu_stack.stderr
    assert report["verdict"]["summary"] == "not certified: verify (1 fail, 5 skip)"
    # shown as a log shows it (stderr here, a pipe): each check once, no table, within 100 columns
    lines = proc.stderr.splitlines()
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    assert not any(c in proc.stderr for c in "┏│└") and "starting" not in proc.stderr  # no process started
    for name in skipped:
        assert sum(line.startswith(f"  {name} ") for line in lines) == 1
    assert proc.stderr.count("--device cuda, but this node has no GPU") == 1
    assert lines[-1] == "not certified: verify (1 fail, 5 skip)"


def test_without_torch_the_first_check_names_the_extra_and_the_rest_are_skipped(tmp_path: Path) -> None:
    proc = run_gpuenv("verify", "--device", "cpu", "--check", "stack", "--check", "amp", env=shadow_torch(tmp_path))
    assert proc.returncode == 3, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "stack error" in text and "needs torch, which is not installed: pip install 'gpuenv[verify]'" in text
    assert "amp skip 0.0s not run: stack found that torch cannot run here" in text
    assert proc.stdout.splitlines()[-1] == "could not run: stack (1 skip, 1 error)"


# --- every help has an example and its exit codes --------------------------------------------------


def _paths(command: click.Command, path: tuple[str, ...], parent: click.Context | None) -> list[tuple[str, ...]]:
    found = [path]
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path[-1], parent=parent)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None
            found += _paths(sub, (*path, name), ctx)
    return found


COMMAND_PATHS = [path[1:] for path in _paths(cli, ("gpuenv",), None)]


def test_the_walk_finds_every_command_and_group() -> None:
    assert len(COMMAND_PATHS) >= 26 and ("slurm", "prolog") in COMMAND_PATHS and ("fleet", "baseline") in COMMAND_PATHS


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=lambda p: " ".join(p) or "gpuenv")
def test_every_help_has_an_example_and_its_exit_codes(path: tuple[str, ...]) -> None:
    """Every command can fail (a bad request at least), so every --help, groups' too, says how."""
    proc = run_gpuenv(*path, "--help", env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "Examples:" in text, text
    examples = text.split("Examples:", 1)[1].split("\n\n", 1)[0]
    named = " ".join(("gpuenv", *path))
    assert any(named in line for line in examples.splitlines()), f"no example of {named}:\n{examples}"
    codes = " ".join(text.split("Exit codes:", 1)[1].split()) if "Exit codes:" in text else ""
    assert codes, f"no exit codes in the help of {named}"
    assert all(f"{code} " in codes for code in ("0", "2")), codes


# --- tune power without a GPU ---------------------------------------------------------------------


def test_tune_power_on_a_machine_without_a_gpu_says_so_and_names_no_vendors_install(
    gpu_less: dict[str, str],
) -> None:
    proc = run_gpuenv("tune", "power", "--device", "cpu", env=gpu_less)
    assert proc.returncode == 3 and proc.stdout == ""
    assert proc.stderr.startswith("gpuenv: error: this node has no GPU to tune: none on the PCI bus")
    assert "gpuenv[rocm]" not in proc.stderr and "amd-smi" not in proc.stderr and "pip install" not in proc.stderr
    help_text = " ".join(run_gpuenv("tune", "power", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "the GPUs' limits are stepped all the same, so a GPU is needed" in help_text


def test_tune_power_on_an_nvidia_node_without_its_library_names_nvidias_fix(
    gpu_less: dict[str, str], tmp_path: Path
) -> None:
    bus = Path(gpu_less[TEST_SYSFS_ENV]) / "0000:18:00.0"
    bus.mkdir()
    (bus / "vendor").write_text("0x10de\n")
    (bus / "class").write_text("0x030200\n")
    proc = run_gpuenv("tune", "power", env=gpu_less)
    assert proc.returncode == 3
    assert "NVML cannot be used here: library-not-found" in proc.stderr and "install the NVIDIA driver" in proc.stderr
    assert "AMD" not in proc.stderr and "gpuenv[rocm]" not in proc.stderr
    assert os.environ.get(TEST_SYSFS_ENV) is None  # the bus is this test's own
