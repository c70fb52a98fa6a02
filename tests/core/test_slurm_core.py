"""The pure half of the Slurm hooks: reasons, whose drain it is, node names, slurm.conf lines."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuenv.slurm import core
from gpuenv.verify import reportfile


def _report(*checks: dict[str, Any]) -> reportfile.VerifyReport:
    """A report with these checks, as the hooks read it (gpuenv.verify.reportfile)."""
    doc = {"schema": reportfile.SCHEMA_V2, "checks": checks, "verdict": {"outcome": "not certified", "summary": "x"}}
    found = reportfile.decode(json.dumps(doc).encode())
    assert isinstance(found, reportfile.VerifyReport)
    return found


def test_reason_is_one_prefixed_line_within_the_limit() -> None:
    text = core.reason("nvml.ecc", "GPU3", "uncorrectable\nECC   errors " + "x" * 500)
    assert text.startswith("gpuenv: nvml.ecc GPU3 uncorrectable ECC errors")
    assert "\n" not in text
    assert len(text) == core.REASON_MAX
    assert text.endswith("...")


def test_short_reason_is_kept_whole() -> None:
    assert core.reason("stack", None, "torch missing") == "gpuenv: stack torch missing"


@pytest.mark.parametrize(
    ("reason", "ours"),
    [
        ("gpuenv: nvml GPU0 x", True),
        ("gpuenv: could not run: y", True),
        ("bad DIMM", False),
        (None, False),
        ("", False),
        ("Prolog error gpuenv:", False),
    ],
)
def test_only_reasons_gpuenv_wrote_are_ours(reason: str | None, ours: bool) -> None:
    assert core.is_ours(reason) is ours


def test_failure_reason_prefers_the_finding_code_and_names_the_gpu() -> None:
    finding = {"severity": "fail", "message": "GPU 1: row remapping pending", "gpu": {"index": 1}, "code": "nvml.rows"}
    report = _report(
        {"name": "stack", "status": "pass", "findings": []},
        {"name": "nvml", "status": "fail", "findings": [{"severity": "warn", "message": "w"}, finding]},
    )
    assert core.failure_reason(report) == "gpuenv: nvml.rows GPU1 GPU 1: row remapping pending"


def test_failure_reason_falls_back_to_the_check_name_without_a_code() -> None:
    report = _report({"name": "allreduce", "status": "fail", "findings": [{"severity": "fail", "message": "wrong"}]})
    assert core.failure_reason(report) == "gpuenv: allreduce wrong"


def test_a_timeout_without_findings_names_the_check_and_status() -> None:
    report = _report({"name": "amp", "status": "timeout", "summary": "ran past 20 s", "findings": []})
    assert core.failure_reason(report) == "gpuenv: amp.timeout ran past 20 s"


def test_could_not_run_reason() -> None:
    assert core.could_not_run_reason("torch missing") == "gpuenv: could not run: torch missing"
    # verify's own verdict already says so: not twice
    assert core.could_not_run_reason("could not run: stack (1 error)") == "gpuenv: could not run: stack (1 error)"


def test_job_gpus_prefer_cuda_visible_devices_then_slurm_job_gpus() -> None:
    assert core.job_gpus({"CUDA_VISIBLE_DEVICES": "2,3", "SLURM_JOB_GPUS": "0"}) == "2,3"
    assert core.job_gpus({"SLURM_JOB_GPUS": "4,5"}) == "4,5"
    assert core.job_gpus({}) is None


def test_node_names_slurmd_name_first_then_short_then_full_host_name() -> None:
    assert core.candidate_node_names({"SLURMD_NODENAME": "gpu07"}, "n7.cluster.example") == [
        "gpu07",
        "n7",
        "n7.cluster.example",
    ]
    assert core.candidate_node_names({}, "vm") == ["vm"]


def test_config_lines_and_scripts() -> None:
    req = core.ConfigRequest("/usr/local/bin/gpuenv", "/etc/slurm", "/var/log/gpuenv", 300, "IDLE")
    assert core.config_lines(req) == [
        "HealthCheckProgram=/etc/slurm/gpuenv-health-check",
        "HealthCheckInterval=300",
        "HealthCheckNodeState=IDLE",
        "Prolog=/etc/slurm/gpuenv-prolog",
        "Epilog=/etc/slurm/gpuenv-epilog",
        "PrologFlags=Alloc",
    ]
    script = core.wrapper_script("/usr/local/bin/gpuenv", "prolog", ["--reports-dir", "/var/log/gpuenv"])
    assert script == "#!/bin/sh\nexec /usr/local/bin/gpuenv -q slurm prolog --reports-dir /var/log/gpuenv\n"


def test_config_refuses_paths_with_spaces() -> None:
    with pytest.raises(ValueError, match="plain"):
        core.config_lines(core.ConfigRequest("/opt/my gpuenv/bin/gpuenv", "/etc/slurm", "/var/log", 300, "IDLE"))
