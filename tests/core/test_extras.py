"""Each optional extra absent: every command still starts, and a command that needs the extra stops with
one line and the one `pip install 'gpuenv[X]'` hint (exit 3), never "gpuenv crashed".

The absence is real to Python: the child process puts None in sys.modules for the extra's modules, so
any import of them raises ImportError, as on a machine without the extra.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuenv.cli import COMMANDS
from gpuenv.errors import CannotRun
from gpuenv.extras import EXTRAS, install_hint, need, needed
from gpuenv.verify.launch import expand_nodelist

# in the child: block the modules, then run the real CLI's main() and report its exit status
CHILD = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from gpuenv.cli import main
try:
    main(sys.argv[2:])
except SystemExit as stop:
    sys.exit(stop.code)
"""


def extra_modules(extra: str) -> list[str]:
    return [module for module, (owner, _) in EXTRAS.items() if owner == extra]


def without(extra: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    blocked = ",".join(extra_modules(extra))
    return subprocess.run(
        [sys.executable, "-c", CHILD, blocked, *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def assert_clean_refusal(done: subprocess.CompletedProcess[str], extra: str) -> None:
    assert "crashed" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 3, done.stderr
    message, hint = done.stderr.strip().splitlines()
    assert message.startswith("gpuenv: error: ") and "not installed" in message
    assert hint.strip() == f"hint: {install_hint(extra)}"


EXTRA_NAMES = sorted({extra for extra, _ in EXTRAS.values()})


@pytest.mark.parametrize("extra", EXTRA_NAMES)
def test_every_command_starts_without_each_extra(extra: str) -> None:
    script = (
        "import sys\n"
        f"for name in {extra_modules(extra)!r}: sys.modules[name] = None\n"
        "from click.testing import CliRunner\n"
        "from gpuenv.cli import cli\n"
        f"for name in {sorted(COMMANDS)!r}:\n"
        "    done = CliRunner().invoke(cli, [name, '--help'])\n"
        "    assert done.exit_code == 0, (name, done.output, done.exception)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_provision_render_only_without_the_ansible_extra(tmp_path: Path) -> None:
    (tmp_path / "hosts.ini").write_text("[gpu]\ngpu01\n")
    done = without("ansible", "provision", "-i", "hosts.ini", "--cuda", "12.4", "--render-only", "out", cwd=tmp_path)
    assert_clean_refusal(done, "ansible")


def test_build_image_without_the_docker_extra(tmp_path: Path) -> None:
    done = without("docker", "build-image", "--cuda", "12.4", "--tag", "gpuenv-test:x", cwd=tmp_path)
    assert_clean_refusal(done, "docker")


def test_fleet_report_html_without_the_report_extra(tmp_path: Path) -> None:
    report = tmp_path / "gpu01.json"
    report.write_text(json.dumps({"schema_version": 1}))
    done = without("report", "fleet", "report", str(tmp_path), "--html", str(tmp_path / "f.html"), cwd=tmp_path)
    assert_clean_refusal(done, "report")


def test_kb_refresh_without_the_kb_extra(tmp_path: Path) -> None:
    done = without("kb", "kb", "refresh", cwd=tmp_path)
    assert_clean_refusal(done, "kb")


def test_verify_across_slurm_nodes_without_the_slurm_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hostlist", None)
    with pytest.raises(CannotRun) as info:
        expand_nodelist("gpu[001-002]")
    assert info.value.hint == install_hint("slurm")


def test_need_names_the_extra_and_returns_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    assert need("json", "reading") is json
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(CannotRun, match="reading an inventory needs PyYAML") as info:
        need("yaml", "reading an inventory")
    assert info.value.hint == "pip install 'gpuenv[ansible]'"
    with pytest.raises(CannotRun, match="a typed import needs PyYAML"), needed("yaml", "a typed import"):
        import yaml  # type: ignore[import-untyped]  # noqa: F401  # the import the test blocks
