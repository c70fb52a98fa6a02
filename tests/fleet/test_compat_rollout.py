"""build-image --fleet and provision --fleet: a warning naming the hosts that cannot run the stack, a refusal
(exit 2, nothing written) with --strict, and quiet when every host runs it."""

from __future__ import annotations

import pytest

from tests.conftest import gpuenv_main
from tests.fleet.compat_fleet import FLEET, write_fleet

CU128 = ("--torch", "2.7.0+cu128")
RUN_IT = tuple(s for s in FLEET if s.code in ("9.0", "10.0", "12.0") and s.driver >= "570")  # every one runs cu128


def commands(out: str) -> list[tuple[str, ...]]:
    return [
        ("build-image", *CU128, "--render-only", f"{out}/image"),
        ("provision", "gpu01", *CU128, "--render-only", f"{out}/project"),
    ]


@pytest.mark.parametrize("which", [0, 1])
def test_the_rollout_warns_of_the_hosts_that_cannot_run_it(tmp_path, capsys, which: int) -> None:
    fleet = str(write_fleet(tmp_path / "fleet"))
    command = commands(str(tmp_path))[which]
    assert gpuenv_main(*command, "--fleet", fleet) == 0
    err = capsys.readouterr().err
    assert "warning: the fleet" in err and "cannot all run torch 2.7.0+cu128" in err
    assert "does not run: v100-[001-002] (its GPU code is sm_75…sm_120 (+PTX 12.0): no kernel for Volta sm_70)" in err
    assert "a100-001 (driver 470.256.02 is below 525.60.13" in err
    assert (tmp_path / command[-1].rsplit("/", 1)[1]).is_dir()


@pytest.mark.parametrize("which", [0, 1])
def test_strict_refuses_and_writes_nothing(tmp_path, capsys, which: int) -> None:
    fleet = str(write_fleet(tmp_path / "fleet"))
    command = commands(str(tmp_path))[which]
    assert gpuenv_main(*command, "--fleet", fleet, "--strict") == 2
    assert "gpuenv resolve --fleet gives the newest stack" in capsys.readouterr().err
    assert not (tmp_path / command[-1].rsplit("/", 1)[1]).exists()


@pytest.mark.parametrize("which", [0, 1])
def test_a_fleet_that_runs_it_says_nothing_even_strict(tmp_path, capsys, which: int) -> None:
    fleet = str(write_fleet(tmp_path / "fleet", RUN_IT))
    assert gpuenv_main(*commands(str(tmp_path))[which], "--fleet", fleet, "--strict") == 0
    assert "the fleet" not in capsys.readouterr().err


def test_the_history_spelling_and_the_misuses(tmp_path, capsys) -> None:
    history = tmp_path / "history.sqlite"
    gpuenv_main("fleet", "report", str(write_fleet(tmp_path / "fleet")), "--history", str(history), "--json")
    capsys.readouterr()
    image = ("build-image", *CU128, "--render-only", str(tmp_path / "image"))
    assert gpuenv_main(*image, "--fleet-history", str(history), "--strict") == 2
    assert "v100-[001-002]" in capsys.readouterr().err
    assert gpuenv_main(*image, "--strict") == 2  # --strict without a fleet
    assert gpuenv_main(*image, "--fleet", str(tmp_path / "fleet"), "--fleet-history", str(history)) == 2
    assert gpuenv_main("provision", "gpu01", "--fleet", str(tmp_path / "fleet")) == 2  # each host's own stack
    assert "--fleet judges the stack provision installs" in capsys.readouterr().err
