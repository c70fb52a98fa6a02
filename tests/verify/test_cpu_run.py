"""The whole verify on the CPU with real PyTorch (gloo), through the real CLI, and its outputs."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from xml.etree import ElementTree as ET

import jsonschema
import pytest

from gpuenv.resources import data_file
from tests.conftest import run_gpuenv
from tests.verify.conftest import check, nvidia_bus, shadow_torch, verify_json

pytestmark = pytest.mark.cpu  # real torch in child processes: nox -s cpu
SCHEMA = json.loads(data_file("report.schema.json").read_text())
PROM_LINE = re.compile(r'^[a-z_]+(\{([a-z_]+="[^"]*",?)*\})? -?[0-9.e+-]+$')


@pytest.mark.slow
def test_quick_on_the_cpu_certifies_and_writes_every_output(tmp_path: Path) -> None:
    report_path, junit, prom = tmp_path / "verify.json", tmp_path / "verify.xml", tmp_path / "gpuenv.prom"
    proc = run_gpuenv(
        "verify",
        "--device",
        "cpu",
        "--report",
        str(report_path),
        "--junit",
        str(junit),
        "--prometheus",
        str(prom),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "certified (CPU only)" in proc.stdout and "allreduce" in proc.stdout
    report = json.loads(report_path.read_text())
    jsonschema.validate(report, SCHEMA)
    assert report["verdict"]["certified"] and report["cpu_only"] and not report["partial"]
    assert {c["name"]: c["status"] for c in report["checks"]} == {
        "nvml": "skip",
        "stack": "pass",
        "allreduce": "pass",
        "amp": "pass",
        "profiler": "pass",
    }
    allreduce = check(report, "allreduce")
    assert allreduce["metrics"]["world"] == 2 and allreduce["metrics"]["backend"] == "gloo"
    assert allreduce["metrics"]["busbw_gbps"] > 0
    assert report["stack"]["torch"].startswith("2.")
    # the profiler trace lands beside the report
    [trace] = check(report, "profiler")["artifacts"]
    assert Path(trace).parent == tmp_path / "verify.artifacts"
    assert json.loads(Path(trace).read_text())["traceEvents"]
    # JUnit: one testcase per check, the skip marked as such
    suite = ET.parse(junit).getroot()
    assert [c.get("name") for c in suite.iter("testcase")] == [c["name"] for c in report["checks"]]
    assert suite.get("skipped") == "1" and suite.get("failures") == "0" and suite.get("errors") == "0"
    # Prometheus textfile: valid lines, world-readable
    text = prom.read_text()
    assert all(PROM_LINE.match(line) for line in text.splitlines() if not line.startswith("#")), text
    assert 'gpuenv_verify_check_status{check="allreduce",status="pass"} 1' in text
    assert "gpuenv_verify_certified" in text and "gpuenv_verify_busbw_gbps" in text
    assert stat.S_IMODE(prom.stat().st_mode) == 0o644
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left


@pytest.mark.slow
def test_standard_on_the_cpu_certifies() -> None:
    code, report, stderr = verify_json("--device", "cpu", "--level", "standard", timeout=900)
    assert code == 0, stderr
    jsonschema.validate(report, SCHEMA)
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses == {
        "nvml": "skip",
        "stack": "pass",
        "allreduce": "pass",
        "amp": "pass",
        "profiler": "pass",
        "compile": "pass",
        "conv": "pass",
    }
    sizes = check(report, "allreduce")["metrics"]["sizes"]
    assert {row["collective"] for row in sizes} == {"allreduce", "allgather", "reducescatter"}
    assert max(row["bytes"] for row in sizes) == 256 << 20


def test_without_report_nothing_is_written(tmp_path: Path) -> None:
    proc = run_gpuenv("verify", "--device", "cpu", "--check", "profiler", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--report", "/nonexistent-dir/r.json"], {}, "does not exist"),
        (["--baseline", "/nonexistent.json"], {}, "does not exist"),
        (["--expect-gpus", "0"], {}, "0"),
        (["--level", "fast"], {}, "fast"),
        (["--check", "bogus"], {}, "bogus"),
        ([], {"GPUENV_TEST_FAULT": "allreduce:explode"}, "GPUENV_TEST_FAULT"),
    ],
)
def test_bad_requests_exit_2_and_write_nothing(
    tmp_path: Path, args: list[str], env: dict[str, str], words: str
) -> None:
    proc = run_gpuenv("verify", "--device", "cpu", "--junit", str(tmp_path / "j.xml"), *args, env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_bad_baseline_file_is_a_bad_request(tmp_path: Path) -> None:
    baseline = tmp_path / "b.json"
    baseline.write_text("{}")
    proc = run_gpuenv("verify", "--device", "cpu", "--baseline", str(baseline))
    assert proc.returncode == 2 and "schema" in proc.stderr and "hint:" in proc.stderr


def test_no_torch_on_a_cpu_machine_exits_3_naming_the_extra_once(tmp_path: Path) -> None:
    """A base install (no torch): the first check says which extra installs it, the next is skipped naming it."""
    code, report, _ = verify_json(
        "--device", "cpu", "--check", "stack", "--check", "allreduce", env=shadow_torch(tmp_path)
    )
    assert code == 3 and report["verdict"]["outcome"] == "could not run"
    stack = check(report, "stack")
    assert stack["status"] == "error"
    assert stack["summary"] == "the stack check needs torch, which is not installed: pip install 'gpuenv[verify]'"
    assert check(report, "allreduce")["status"] == "skip"
    assert check(report, "allreduce")["summary"] == "not run: stack found that torch cannot run here"


def test_no_torch_on_a_gpu_node_is_a_failure(tmp_path: Path) -> None:
    env = {**shadow_torch(tmp_path), **nvidia_bus(tmp_path)}
    code, report, _ = verify_json("--device", "cuda", "--check", "stack", env=env)
    assert code == 1 and check(report, "stack")["status"] == "fail"


def test_cpu_only_torch_on_a_gpu_node_fails_once_and_skips_the_workloads_after_it(tmp_path: Path) -> None:
    code, report, _ = verify_json(
        "--device", "cuda", "--check", "allreduce", "--check", "amp", env=nvidia_bus(tmp_path)
    )
    assert code == 1
    allreduce, amp = check(report, "allreduce"), check(report, "amp")
    assert allreduce["status"] == "fail" and "CPU-only build" in allreduce["summary"]
    assert (amp["status"], amp["summary"]) == ("skip", "not run: allreduce found that torch cannot run here")
    assert report["verdict"]["summary"] == "not certified: allreduce (1 fail, 1 skip)"


def test_image_needs_a_valid_reference_and_a_docker_engine(tmp_path: Path) -> None:
    proc = run_gpuenv("verify", "--image", "Not A Ref!")
    assert proc.returncode == 2 and "--image" in proc.stderr
    proc = run_gpuenv(
        "verify",
        "--image",
        "gpuenv-test/none:1",
        "--device",
        "cpu",
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"},
    )
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
