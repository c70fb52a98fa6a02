from __future__ import annotations

import pytest

from gpuenv.verify import faults, registry
from gpuenv.verify.model import CheckResult, Finding, GpuRef, decide, status_from_findings


def result(name: str, status: str) -> CheckResult:
    return CheckResult(name, status)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("statuses", "strict", "outcome", "code"),
    [
        (["pass", "pass", "skip"], False, "certified", 0),
        (["pass", "warn"], False, "certified", 0),
        (["pass", "warn"], True, "not certified", 1),
        (["pass", "fail"], False, "not certified", 1),
        (["pass", "timeout"], False, "not certified", 1),
        (["crash", "pass"], False, "not certified", 1),
        (["error", "pass"], False, "could not run", 3),
        (["error", "fail"], False, "not certified", 1),
        (["skip", "skip"], False, "could not run", 3),
        ([], False, "could not run", 3),
    ],
)
def test_verdict_and_exit_code(statuses: list[str], strict: bool, outcome: str, code: int) -> None:
    verdict = decide(
        [result(f"c{i}", s) for i, s in enumerate(statuses)], strict=strict, cpu_only=False, interrupted=None
    )
    assert (verdict.outcome, verdict.exit_code, verdict.certified) == (outcome, code, code == 0)


def test_cpu_only_verdict_says_so_and_interrupted_is_never_certified() -> None:
    assert "CPU only" in decide([result("a", "pass")], strict=False, cpu_only=True, interrupted=None).summary
    verdict = decide([result("a", "pass")], strict=False, cpu_only=False, interrupted="SIGTERM")
    assert (verdict.certified, verdict.outcome, verdict.exit_code) == (False, "interrupted", 3)


def test_status_follows_the_worst_finding() -> None:
    assert status_from_findings([]) == "pass"
    assert status_from_findings([Finding("warn", "w", "r")]) == "warn"
    assert status_from_findings([Finding("warn", "w", "r"), Finding("fail", "f", "r", "drain")]) == "fail"


def test_finding_round_trips_with_its_gpu() -> None:
    finding = Finding(
        "fail", "ecc", "reset", "reset-gpu", GpuRef(3, "GPU-x", "0000:48:00.0"), "ecc", "nvml.ecc_uncorrected"
    )
    assert Finding.from_dict(finding.to_dict()) == finding
    assert GpuRef(3, "GPU-x", "0000:48:00.0").label() == "GPU 3 (GPU-x, 0000:48:00.0)"


def test_levels_select_checks_in_order() -> None:
    assert [c.name for c in registry.select("quick", ())] == ["nvml", "stack", "allreduce", "amp", "profiler"]
    assert [c.name for c in registry.select("standard", ())][-2:] == ["compile", "conv"]
    assert [c.name for c in registry.select("deep", ())][-4:] == ["memory", "parallel", "fp8", "onnx"]
    assert [c.name for c in registry.select("quick", ("conv", "nvml"))] == ["nvml", "conv"]


def test_fault_switch_is_inert_unless_set() -> None:
    assert faults.active("allreduce", rank=1, env={}) is None
    env = {faults.ENV: "allreduce:corrupt:rank1,amp:abort"}
    assert faults.active("allreduce", rank=1, env=env) == "corrupt"
    assert faults.active("allreduce", rank=0, env=env) is None
    assert faults.active("allreduce", env=env) is None  # a rank fault never hits the worker itself
    assert faults.active("amp", env=env) == "abort"


@pytest.mark.parametrize("bad", ["allreduce", "allreduce:explode", "allreduce:hang:one", "a:hang:rank"])
def test_fault_switch_rejects_garbage(bad: str) -> None:
    with pytest.raises(ValueError):
        faults.parse(bad)


def test_help_and_the_engine_import_no_heavy_module() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import gpuenv.cli.verify_cmd, gpuenv.verify.engine, gpuenv.output.verify; "
        "heavy = {'torch', 'pynvml', 'numpy', 'docker'} & set(sys.modules); assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
