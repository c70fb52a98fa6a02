"""verify --inputs: the policy and baseline files as one document on stdin (fleet verify's one command
per host), unpacked into a private folder for the run and gone after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuenv.errors import BadRequest
from gpuenv.verify import inputs

WARN = json.dumps({"schema": "gpuenv.nvml-policy/1", "rules": {"gpu_missing": {"severity": "warn"}}})


def verify(*args: str, stdin: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmp)}  # where the private folder is made: empty again afterwards
    command = [sys.executable, "-m", "gpuenv", "-q", "verify", "--check", "nvml", "--passive", "--device", "cpu"]
    return subprocess.run([*command, *args], input=stdin, capture_output=True, text=True, env=env, timeout=120)


def test_a_policy_on_stdin_judges_the_run_and_leaves_nothing_behind(tmp_path: Path) -> None:
    done = verify(
        "--expect-gpus", "8", "--inputs", "-", "--report", "-", stdin=inputs.pack({"policy": WARN}), tmp=tmp_path
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert {f["code"]: f["severity"] for c in report["checks"] for f in c["findings"]}["nvml.gpu_missing"] == "warn"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("stdin", "args", "said"),
    [
        ("{", (), "--inputs -: not JSON"),
        ('{"schema": "gpuenv.verify-inputs/0"}', (), "not a gpuenv.verify-inputs/1 document"),
        (inputs.pack({"policy": "{}"}).replace("policy", "script"), (), "'script' is not an input file verify takes"),
        (inputs.pack({"policy": WARN}), ("--policy", "/etc/hostname"), "--inputs and --policy exclude each other"),
        ("x" * (2 << 20), (), "more than 1 MiB on stdin"),
    ],
)
def test_a_bad_document_is_a_bad_request(tmp_path: Path, stdin: str, args: tuple[str, ...], said: str) -> None:
    done = verify("--inputs", "-", *args, stdin=stdin, tmp=tmp_path)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_document_carries_the_texts_as_given() -> None:
    texts = {"policy": WARN, "baseline": '{"schema": "gpuenv.baselines/1"}\n'}
    assert inputs.unpack(inputs.pack(texts).encode(), "-") == texts
    with pytest.raises(BadRequest, match="not a gpuenv"):
        inputs.unpack(b"[]", "-")
