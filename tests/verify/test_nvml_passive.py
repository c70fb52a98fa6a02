"""`gpuenv verify --check nvml --passive`: the idle NVML reading in the calling process, with no
torch, no worker process and no load, judged by the same policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuenv.errors import BadRequest
from gpuenv.slurm.service import HookRequest, _verify_args
from gpuenv.verify.cost import report_cost
from gpuenv.verify.engine import run_verify
from gpuenv.verify.image_run import run_in_image
from gpuenv.verify.passive import run_passive
from gpuenv.verify.service import VerifyRequest, loaded, verify
from tests.verify.conftest import check, scenario_env, verify_json

# Loaded in every Python process the run starts (PYTHONPATH): records each import of torch and
# each process started (subprocess, fork, exec, spawn) in the file GPUENV_TEST_AUDIT names.
SITECUSTOMIZE = """
import os, sys
_log = os.environ.get("GPUENV_TEST_AUDIT")
_events = ("subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.system")
def _hook(event, args):
    if not _log:
        return
    hit = (event == "import" and args and str(args[0]).split(".")[0] == "torch") or event in _events
    if hit:
        with open(_log, "a") as out:
            out.write(f"{os.getpid()} {event} {args[0] if args else ''}\\n")
sys.addaudithook(_hook)
"""


def audited_env(lib: Path, scenario: str, tmp: Path) -> dict[str, str]:
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    root = Path(__file__).resolve().parents[2]
    return {
        **scenario_env(lib, scenario),
        "PYTHONPATH": f"{site}:{root}",
        "GPUENV_TEST_AUDIT": str(tmp / "audit.log"),
        "GPUENV_POWER_RECORD": str(tmp / "power-applied.json"),
    }


def test_passive_imports_no_torch_and_starts_no_process(fake_nvml_dir: Path, tmp_path: Path) -> None:
    env = audited_env(fake_nvml_dir, "healthy-8xh100", tmp_path)
    code, report, _ = verify_json("--check", "nvml", "--passive", "--expect-gpus", "8", env=env)
    result = check(report, "nvml")
    assert code == 0 and result["status"] == "pass" and report["options"]["passive"] is True
    assert [c["name"] for c in report["checks"]] == ["nvml"] and len(report["host"]["gpus"]) == 8
    log = (tmp_path / "audit.log").read_text() if (tmp_path / "audit.log").exists() else ""
    assert log == "", f"the passive run imported torch or started a process:\n{log}"
    # the audit is live: the full check starts its worker and load processes, and says so
    verify_json("--check", "nvml", env=env)
    assert "subprocess.Popen" in (tmp_path / "audit.log").read_text()


def test_passive_judges_what_it_reads_and_says_what_it_did_not(fake_nvml_dir: Path, tmp_path: Path) -> None:
    env = {**scenario_env(fake_nvml_dir, "ecc-errors"), "GPUENV_POWER_RECORD": str(tmp_path / "r.json")}
    code, report, _ = verify_json("--check", "nvml", "--passive", env=env)
    result = check(report, "nvml")
    assert code == 1 and [f["code"] for f in result["findings"] if f["severity"] == "fail"] == ["nvml.ecc_uncorrected"]
    assert any(f["message"].startswith("passive: read without load") for f in result["findings"])
    env = {**scenario_env(fake_nvml_dir, "power-capped"), "GPUENV_POWER_RECORD": str(tmp_path / "r.json")}
    code, report, _ = verify_json("--check", "nvml", "--passive", env=env)
    assert code == 0 and check(report, "nvml")["status"] == "warn"
    assert "400 W enforced, below its default 700 W" in check(report, "nvml")["summary"]


def test_passive_a_missing_gpu_fails(fake_nvml_dir: Path, tmp_path: Path) -> None:
    env = {**scenario_env(fake_nvml_dir, "gpu-missing"), "GPUENV_POWER_RECORD": str(tmp_path / "r.json")}
    code, report, _ = verify_json("--check", "nvml", "--passive", "--expect-gpus", "8", env=env)
    assert code == 1 and check(report, "nvml")["findings"][0]["code"] == "nvml.gpu_missing"


@pytest.mark.parametrize("checks", [(), ("nvml", "amp"), ("amp",)])
def test_passive_is_for_the_nvml_check_alone(checks: tuple[str, ...]) -> None:
    with pytest.raises(BadRequest, match="--passive"):
        verify(VerifyRequest(checks=checks, passive=True))


def test_passive_writes_the_report_file(fake_nvml_dir: Path, tmp_path: Path) -> None:
    env = {**scenario_env(fake_nvml_dir, "healthy-8xh100"), "GPUENV_POWER_RECORD": str(tmp_path / "r.json")}
    out = tmp_path / "report.json"
    code, _, _ = verify_json("--check", "nvml", "--passive", "--report", str(out), env=env)
    assert code == 0 and json.loads(out.read_text())["checks"][0]["name"] == "nvml"


def test_the_slurm_epilog_runs_the_passive_check_and_the_others_do_not() -> None:
    epilog = _verify_args(HookRequest("epilog", "quick", 30.0, checks=("nvml",)), None)
    assert epilog[-3:] == ["--check", "nvml", "--passive"]
    assert "--passive" not in _verify_args(HookRequest("epilog", "quick", 30.0, checks=("nvml", "stack")), None)
    assert "--passive" not in _verify_args(HookRequest("health-check", "quick", 50.0), None)
    assert "--passive" not in _verify_args(HookRequest("prolog", "quick", 30.0, checks=("nvml",)), None)


# What the passive run must never import: the engine and its worker machinery, Docker, the cost figures.
NOT_PASSIVE = ("gpuenv.verify.engine", "gpuenv.verify.runner", "gpuenv.adapters.docker", "gpuenv.verify.cost")
# Nor what only other commands or formats need (bench/bench_nvml_passive.py times its start-up): the hosts'
# Ansible modules, JUnit's XML, statistics (with fractions and decimal), socket; logging (asked for with -v or
# -q), difflib (a misspelt name), traceback (--debug), a TOML parser (a config file, which a run may not have).
NOT_AT_START = (
    *("gpuenv.ansible.hosts", "gpuenv.ansible.runner", "xml.etree.ElementTree", "statistics", "socket"),
    *("logging", "difflib", "traceback", "tomllib"),
)
# The CLI as `python -m gpuenv` runs it, writing the modules it imported to argv[1] when it exits
MODULES_AT_EXIT = """
import atexit, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write("\\n".join(sorted(sys.modules))))
sys.argv[0] = "gpuenv"
runpy.run_module("gpuenv", run_name="__main__")
"""


def modules_imported(args: list[str], env: dict[str, str], tmp: Path) -> set[str]:
    out = tmp / "modules.txt"
    done = subprocess.run(
        [sys.executable, "-c", MODULES_AT_EXIT, str(out), *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(out.read_text().splitlines())


def test_passive_imports_only_what_it_uses(fake_nvml_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, **scenario_env(fake_nvml_dir, "healthy-8xh100")}
    args = ["verify", "--check", "nvml", "--json"]
    passive = modules_imported([*args, "--passive"], env, tmp_path)
    assert "gpuenv.verify.passive" in passive and [m for m in NOT_PASSIVE if m in passive] == []
    assert [m for m in NOT_AT_START if m in passive] == []
    assert {"gpuenv.verify.engine", "gpuenv.verify.runner"} <= modules_imported(args, env, tmp_path)


def test_each_run_is_loaded_by_the_name_the_service_gives_it() -> None:
    assert loaded("passive") is run_passive and loaded("node") is run_verify
    assert loaded("image") is run_in_image and loaded("cost") is report_cost
