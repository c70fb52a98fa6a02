"""Injected faults (GPUENV_TEST_FAULT) through the real CLI and real torch ranks: verify must fail,
time out and crash as it should, name the culprit, leave no process behind and keep going."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.verify.conftest import check, verify_json

pytestmark = [pytest.mark.slow, pytest.mark.cpu]


def marked_env(fault: str) -> tuple[dict[str, str], str]:
    """The fault, plus a unique mark every process of the run inherits (to find leftovers)."""
    mark = uuid.uuid4().hex
    return {"GPUENV_TEST_FAULT": fault, "GPUENV_TEST_MARK": mark}, mark


def processes_with(mark: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"GPUENV_TEST_MARK={mark}".encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


def test_a_rank_that_corrupts_one_element_fails_naming_the_rank() -> None:
    env, _ = marked_env("allreduce:corrupt:rank1")
    code, report, _ = verify_json("--device", "cpu", "--check", "allreduce", env=env)
    result = check(report, "allreduce")
    assert code == 1 and result["status"] == "fail"
    [finding] = [f for f in result["findings"] if f["severity"] == "fail"]
    assert finding["message"].startswith("rank 1 ") and "1 wrong element(s)" in finding["message"]
    assert finding["action"] == "drain" and finding["gpu"]["index"] == 1


def test_a_rank_that_hangs_times_out_and_leaves_nothing_behind() -> None:
    env, mark = marked_env("allreduce:hang:rank0")
    started = time.monotonic()
    code, report, _ = verify_json(
        "--device", "cpu", "--check", "allreduce", "--check", "profiler", "--timeout", "10", env=env
    )
    elapsed = time.monotonic() - started
    result = check(report, "allreduce")
    assert code == 1 and result["status"] == "timeout"
    assert result["duration_s"] <= 10 + 5 and "allreduce ran past its 10 s limit" in result["summary"]
    assert processes_with(mark) == []  # worker, forkserver and both ranks are gone
    # a fresh worker ran the rest (profiler: a torch check short enough for the 10 s limit on a busy CPU)
    assert check(report, "profiler")["status"] == "pass"
    assert "not certified" in report["verdict"]["summary"] and "allreduce" in report["verdict"]["summary"]
    assert elapsed < 120


def test_a_rank_that_aborts_is_a_crash_and_the_rest_still_runs() -> None:
    env, mark = marked_env("allreduce:abort:rank1")
    code, report, _ = verify_json("--device", "cpu", "--check", "allreduce", "--check", "profiler", env=env)
    result = check(report, "allreduce")
    assert code == 1 and result["status"] == "crash"
    assert result["detail"]["signal"] == "SIGABRT" and result["detail"]["rank"] == 1
    assert result["summary"] == "rank 1 died with SIGABRT"
    assert check(report, "profiler")["status"] == "pass"
    assert processes_with(mark) == []


def test_a_check_process_that_aborts_is_a_crash_with_its_signal() -> None:
    env, _ = marked_env("amp:abort")
    code, report, _ = verify_json("--device", "cpu", "--check", "amp", "--check", "profiler", env=env)
    result = check(report, "amp")
    assert code == 1 and result["status"] == "crash" and result["detail"]["signal"] == "SIGABRT"
    assert check(report, "profiler")["status"] == "pass"


def test_sigterm_mid_run_writes_a_partial_report(tmp_path: Path) -> None:
    env, mark = marked_env("allreduce:hang:rank0")
    report_path = tmp_path / "verify.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuenv", "verify", "--device", "cpu", "--report", str(report_path)],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        for line in proc.stdout:  # a line per finished check: wait until stack is done and allreduce hangs
            if line.split()[:1] == ["stack"] or time.monotonic() > deadline:
                break
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    report = json.loads(report_path.read_text())
    assert code == 3 and report["partial"] and report["interrupted"] == "SIGTERM"
    assert report["verdict"]["outcome"] == "interrupted" and not report["verdict"]["certified"]
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["stack"] == "pass" and statuses["allreduce"] == "skip"
    assert "interrupted by SIGTERM" in check(report, "allreduce")["summary"]
    assert processes_with(mark) == []


BISECT = """
import json
from gpuenv.verify import ranks
from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.checks.allreduce import judging
from gpuenv.verify.model import GpuRef

if __name__ == "__main__":
    plan = {"sizes": [1 << 20], "iters": 1, "warmup": 0, "collectives": ["allreduce"], "bisect": True}
    results = ranks.launch("gpuenv.verify.checks.allreduce.workload:rank_workload", check="allreduce", world=4,
                           device="cpu", params=plan)
    findings, _ = judging.evaluate(results, world=4, device="cpu", gpu_name="cpu", baselines=load_baselines(),
                                   refs=[GpuRef(i) for i in range(4)])
    print(json.dumps([f.to_dict() for f in findings]))
"""


def test_pairwise_bisection_on_four_real_ranks_names_the_corrupting_one(tmp_path: Path) -> None:
    script = tmp_path / "pairs_probe.py"
    script.write_text(BISECT)
    env, mark = marked_env("allreduce:corrupt:rank2")
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    findings = json.loads(proc.stdout.splitlines()[-1])
    [bisect] = [f for f in findings if f["item"] == "bisect"]
    assert "pairs 1-2, 2-3" in bisect["message"] and "suspect GPU 2" in bisect["message"]
    assert bisect["gpu"]["index"] == 2
    assert processes_with(mark) == []


@pytest.mark.parametrize("fault", ["allreduce:hang", "allreduce:hang:rank0"])
def test_sigkill_of_gpuenv_leaves_no_process_of_the_run(fault: str) -> None:
    """Slurm kills a prolog past its limit with SIGKILL: the worker, the forkserver, the ranks and
    the NVML helper must not live on under PID 1 (each dies with its parent: a pidfd watch)."""
    env, mark = marked_env(fault)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuenv", "verify", "--device", "cpu", "--check", "stack", "--check", "allreduce"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        for line in proc.stdout:  # stack done (its line printed): the allreduce worker (and its ranks) now hang
            if line.split()[:1] == ["stack"] or time.monotonic() > deadline:
                break
        time.sleep(2)
        assert len(processes_with(mark)) >= 2  # gpuenv and at least its worker
        proc.kill()
        proc.wait(timeout=10)
        killed = time.monotonic()
        while processes_with(mark) and time.monotonic() - killed < 5:
            time.sleep(0.1)
        assert processes_with(mark) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
