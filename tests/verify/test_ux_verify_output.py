"""`gpuenv verify`'s output, as a user sees it: one stream (a header first, a live line while each
check runs on a terminal, one plain line per finished check elsewhere, then the table), `-q` prints
the verdict line only, `--json` prints JSON only; `--gpus` and `--list-checks`."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import run_gpuenv
from tests.terminal import in_terminal
from tests.verify.conftest import scenario_env, verify_json

HANG = {"GPUENV_TEST_FAULT": "nvml:hang"}
ONE_CHECK = ("verify", "--device", "cpu", "--check", "nvml")


def test_a_terminal_gets_the_header_first_a_live_line_with_elapsed_time_then_the_table_once() -> None:
    shown = in_terminal(*ONE_CHECK, "--timeout", "3", env=HANG)
    assert shown.code == 1, shown.text
    lines = [line for line in shown.text.splitlines() if line.strip()]
    assert lines[0].startswith("gpuenv verify --level quick on "), lines[:3]
    assert "CPU only (--device cpu); checks: nvml" in lines[0]
    # the header is there before the check has run its course; the live line counts the seconds
    assert shown.first_seen("checks: nvml") < shown.first_seen("nvml ran past its 3 s limit")
    assert shown.first_seen("nvml       running") < shown.first_seen("0:00:02")
    assert shown.first_seen("0:00:02") < shown.first_seen("┏")
    # each check's row once, in the table (no progress line repeating it), and the title not repeated
    assert len(re.findall(r"nvml\s+│?\s*timeout", shown.text)) == 1, shown.text
    assert "gpuenv verify --level quick on" not in shown.text.split("┏", 1)[1]
    assert lines[-1] == "not certified (CPU only): nvml (1 timeout)"


def test_off_a_terminal_each_finished_check_is_one_line_on_the_same_stream_and_no_table() -> None:
    proc = run_gpuenv(*ONE_CHECK)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr == ""  # one stream: nothing shown twice on another
    lines = proc.stdout.splitlines()
    assert lines[0].endswith("CPU only (--device cpu); checks: nvml")
    assert re.fullmatch(r"  nvml\s+skip\s+\d+\.\ds  CPU only: NVML library-not-found", lines[1]), lines[1]
    assert len(lines) == 3 and "running" not in proc.stdout and "┏" not in proc.stdout
    assert lines[-1] == "no check could run (CPU only) (1 skip)"


def test_quiet_prints_the_verdict_line_only() -> None:
    proc = run_gpuenv("-q", *ONE_CHECK)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "no check could run (CPU only) (1 skip)\n", "")
    shown = in_terminal("-q", *ONE_CHECK)
    assert shown.text.strip() == "no check could run (CPU only) (1 skip)"


def test_json_on_a_terminal_is_json_only() -> None:
    shown = in_terminal(*ONE_CHECK, "--json")
    assert json.loads(shown.text)["verdict"]["outcome"] == "could not run"


def test_report_to_stdout_moves_the_whole_show_to_stderr() -> None:
    proc = run_gpuenv(*ONE_CHECK, "--report", "-")
    assert json.loads(proc.stdout)["checks"][0]["name"] == "nvml"
    assert proc.stderr.splitlines()[0].endswith("checks: nvml")
    assert proc.stderr.splitlines()[-1] == "no check could run (CPU only) (1 skip)"


def test_gpus_restricts_the_run_to_those_gpus(fake_nvml_dir: Path) -> None:
    env = scenario_env(fake_nvml_dir, "healthy-8xh100")
    code, report, _ = verify_json("--check", "nvml", "--gpus", "3,0", env=env)
    assert code == 0, report["verdict"]
    assert [(g["index"], g["cuda_index"]) for g in report["host"]["gpus"]] == [(3, 0), (0, 1)]
    assert report["options"]["gpus"] == [3, 0]
    nvml = next(c for c in report["checks"] if c["name"] == "nvml")
    assert nvml["metrics"]["gpus"] == 2  # the NVML check judged the two GPUs it was given


def test_gpus_that_do_not_exist_are_a_bad_request_naming_them(fake_nvml_dir: Path) -> None:
    proc = run_gpuenv("verify", "--check", "nvml", "--gpus", "1,8,9", env=scenario_env(fake_nvml_dir, "healthy-8xh100"))
    assert proc.returncode == 2, proc.stderr
    assert "--gpus 8,9: no such GPU on this node (it has GPUs 0-7)" in proc.stderr


def test_gpus_must_be_unique_non_negative_indices() -> None:
    for given, message in (
        ("0,0", "names GPU 0 twice"),
        ("-1", "not a list of GPU indices"),
        ("0,a", "not a list of GPU indices"),
        ("", "not a list of GPU indices"),
    ):
        proc = run_gpuenv("verify", "--gpus", given)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, (given, proc.stderr)
    proc = run_gpuenv("verify", "--device", "cpu", "--gpus", "0")
    assert proc.returncode == 2 and "--gpus 0: no such GPU on this node (it has no NVIDIA GPU)" in proc.stderr


def test_list_checks_names_each_levels_checks_limits_and_purpose() -> None:
    proc = run_gpuenv("verify", "--list-checks")
    assert proc.returncode == 0, proc.stderr
    assert "quick: 5 checks, aims for 30 s on 8 GPUs" in proc.stdout
    assert "deep: 12 checks" in proc.stdout
    assert "torch.compile of a small function matches eager" in proc.stdout
    levels = json.loads(run_gpuenv("verify", "--list-checks", "--json").stdout)["levels"]
    quick = levels[0]
    assert [c["name"] for c in quick["checks"]] == ["nvml", "stack", "allreduce", "amp", "profiler"]
    assert quick["checks"][0]["limit_s"] == 30 and "nvml.ecc_uncorrected" in quick["checks"][0]["findings"]
