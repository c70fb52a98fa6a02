"""gpuenv claims Python 3.10 and later (requires-python): lint's static check (vermin, as noxfile.py
runs it) fails a construct of a later Python, and nox -s py313 runs the unit tests under 3.13."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from noxfile import VERMIN
from tests.conftest import REPO

LATER = {
    "tomllib": "import tomllib\n",
    "except*": "try:\n    pass\nexcept* ValueError:\n    pass\n",
    "typing.Self": "from typing import Self\n",
}


def _vermin(path: Path) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / VERMIN[0]), *VERMIN[1:], str(path)]  # the venv's script
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_lint_fails_a_construct_of_a_python_after_3_10(tmp_path: Path) -> None:
    for name, code in LATER.items():
        sample = tmp_path / f"{name.replace('.', '_').replace('*', '_star')}.py"
        sample.write_text(code)
        proc = _vermin(sample)
        assert proc.returncode != 0 and "3.11" in proc.stdout, (name, proc.stdout)
    plain = tmp_path / "plain.py"
    plain.write_text("import sys\nif sys.version_info >= (3, 11):\n    import tomllib  # novermin\n")
    assert _vermin(plain).returncode == 0


def test_the_python_the_project_claims_is_the_one_lint_checks() -> None:
    assert 'requires-python = ">=3.10"' in (REPO / "pyproject.toml").read_text()
    assert "--target=3.10-" in VERMIN
