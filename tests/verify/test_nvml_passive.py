"""`gpuenv verify --check nvml --passive`: the idle NVML reading in the calling process, with no
torch, no worker process and no load, judged by the same policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuenv.errors import BadRequest
from gpuenv.slurm.service import HookRequest, _verify_args
from gpuenv.verify.service import VerifyRequest, verify
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
