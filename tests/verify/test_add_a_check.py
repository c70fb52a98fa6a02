"""The "add a check" recipe of docs/verify.md, followed once: a check registered only through the
registry and the findings catalogue (in a copy of the package) shows up in the CLI and runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gpuenv

CHECK = '''"""hello: says hello, and fails when told to."""

from __future__ import annotations

import os

from gpuenv.verify.catalogue import finding
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, status_from_findings


def run(ctx: CheckContext) -> CheckResult:
    findings = [finding("hello.greeting", f"hello from {ctx.device}, {len(ctx.host.gpus)} GPU(s) known")]
    if os.environ.get("HELLO_FAIL"):
        findings.append(finding("hello.refused", "told to fail"))
    return CheckResult("hello", status_from_findings(findings), summary=findings[-1].message, findings=findings)
'''

SPEC = """    CheckSpec("hello", "standard", (10, 10, 10), False, "says hello"),
)
"""


def follow_the_recipe(root: Path) -> Path:
    package = root / "gpuenv"
    shutil.copytree(Path(gpuenv.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    # 1. the check module
    (package / "verify" / "checks" / "hello.py").write_text(CHECK)
    # 2. its entry in the registry
    registry = package / "verify" / "registry.py"
    text = registry.read_text()
    head, _, tail = text.partition("\n)\n\n\ndef select(")
    registry.write_text(head + "\n" + SPEC + "\n\ndef select(" + tail)
    # 3. its findings in the catalogue
    data = package / "data" / "findings.json"
    catalogue = json.loads(data.read_text())
    catalogue["findings"]["hello.greeting"] = {"severity": "info", "action": "none", "remediation": None}
    catalogue["findings"]["hello.refused"] = {
        "severity": "fail",
        "action": "fix-config",
        "remediation": "unset HELLO_FAIL",
    }
    data.write_text(json.dumps(catalogue))
    return root


def run_copy(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuenv", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root), **env},
    )


def test_a_check_added_by_the_recipe_shows_up_and_runs(tmp_path: Path) -> None:
    root = follow_the_recipe(tmp_path)
    assert "hello" in run_copy(root, "verify", "--help").stdout
    proc = run_copy(root, "verify", "--device", "cpu", "--check", "hello", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and [c["name"] for c in report["checks"]] == ["hello"]
    [greeting] = report["checks"][0]["findings"]
    assert greeting["code"] == "hello.greeting" and greeting["message"] == "hello from cpu, 0 GPU(s) known"
    proc = run_copy(root, "verify", "--device", "cpu", "--check", "hello", "--json", HELLO_FAIL="1")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["checks"][0]["status"] == "fail"
    assert report["checks"][0]["findings"][-1]["remediation"] == "unset HELLO_FAIL"
