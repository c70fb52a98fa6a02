"""What a new user still tripped on when resolving, through the real CLI as they ran it: the driver branch of a
stack resolved for their driver, GPU names as nvidia-smi and amd-smi print them, uv's and pip's spellings of a
backend, and refusals that lead with the reason that matters."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import run_gpuenv


def _resolved(*args: str) -> dict:  # type: ignore[type-arg]
    proc = run_gpuenv("resolve", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def _refusal(*args: str) -> str:
    proc = run_gpuenv("resolve", *args)
    assert proc.returncode == 2 and not proc.stdout, proc.stderr
    return proc.stderr


# --- a stack resolved for a driver keeps its branch -------------------------------------------------


def test_a_stack_resolved_for_a_driver_keeps_its_branch_and_provision_installs_it(tmp_path: Path) -> None:
    stack = _resolved("--torch", "2.5", "--gpu", "H100", "--driver", "535")
    assert stack["driver_branch"] == "R535"
    assert stack["reasons"]["driver_branch"].startswith("the branch of driver 535, which the stack was resolved for")
    assert "--driver-branch" in stack["reasons"]["driver_branch"]
    assert _resolved("--driver", "550.54.15")["driver_branch"] == "R550"
    assert _resolved("--torch", "2.5", "--gpu", "H100")["driver_branch"] == "R580"  # no driver: the recommended one
    stack_file = tmp_path / "stack.json"
    stack_file.write_text(json.dumps(stack))
    for i, (extra, branch) in enumerate([((), "535"), (("--driver-branch", "R580"), "580")]):
        project = tmp_path / f"p{i}"
        proc = run_gpuenv("provision", "h1", "--stack", str(stack_file), *extra, "--render-only", str(project))
        assert proc.returncode == 0, proc.stderr
        variables = yaml.safe_load((project / "group_vars" / "all" / "gpuenv.yml").read_text())
        assert variables["nvidia_driver_branch"] == branch
