"""tune power's pure half: the caps tried, the choice, the state file's content and place."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuenv.errors import BadRequest
from gpuenv.power import state
from gpuenv.power.core import CapResult, GpuLimits, PowerState, SavedLimit, cap_result, caps, choose
from gpuenv.validate import percent

H100 = GpuLimits(0, "GPU-0", "NVIDIA H100 80GB HBM3", 200.0, 700.0, 700.0, 700.0)


def test_caps_span_the_range_highest_first_and_include_the_original() -> None:
    assert caps(H100, 5) == [700, 575, 450, 325, 200]
    assert caps(H100, 2) == [700, 200]
    lowered = GpuLimits(1, None, None, 200.0, 700.0, 700.0, 610.0)  # someone set 610 W before
    assert caps(lowered, 3) == [700, 610, 450, 200]
    fixed = GpuLimits(2, None, None, 300.0, 300.0, 300.0, 300.0)  # a range of one value
    assert caps(fixed, 5) == [300]


def result(limit: float, tokens_per_s: float, watts: float | None) -> CapResult:
    measured = {"tokens": tokens_per_s * 10, "seconds": 10.0, "tokens_per_s": tokens_per_s, "wall_s": 10.0}
    measured["energy_j"] = None if watts is None else watts * 10
    return cap_result(limit, measured, on_gpu=True)


def test_the_most_efficient_cap_within_the_loss_is_chosen() -> None:
    sweep = [result(700, 1000, 600), result(575, 990, 575), result(450, 960, 450), result(325, 850, 325)]
    picked = choose(sweep, max_loss=0.05, original_w=700)
    assert picked.limit_w == 450 and picked.loss == pytest.approx(0.04)
    # joules per token: 0.6 at 700 W, 0.46875 at 450 W: 21.9 % saved
    assert picked.saving == pytest.approx(1 - (450 / 960) / (600 / 1000), abs=1e-4)
    assert choose(sweep, max_loss=0.01, original_w=700).limit_w == 575
    assert choose(sweep, max_loss=0.0, original_w=700).limit_w == 700


def test_no_cap_is_chosen_without_joules() -> None:
    sweep = [result(700, 1000, 600), result(450, 960, None)]
    assert choose(sweep, max_loss=0.05, original_w=700).limit_w is None
    cpu = cap_result(
        700, {"tokens": 10, "seconds": 1.0, "tokens_per_s": 10.0, "wall_s": 1.0, "energy_j": 50.0}, on_gpu=False
    )
    assert cpu.watts == 50.0 and cpu.tokens_per_j is None  # a GPU's joules never pay for CPU tokens
    assert choose([cpu], max_loss=0.05, original_w=700).limit_w is None
    assert choose([], max_loss=0.05, original_w=700).limit_w is None


def test_the_state_round_trips_and_a_foreign_file_is_refused() -> None:
    saved = PowerState("applied", 42, "2026-11-30T20:00:00+00:00", (SavedLimit(0, "GPU-0", 700000, 450000),))
    assert PowerState.from_dict(saved.to_dict()) == saved
    assert "kept at 450 W" in saved.describe() and "original 700 W" in saved.describe()
    for bad in ({}, {"schema": "gpuenv.power-state/1", "phase": "tuning", "pid": 1, "started": "x", "gpus": []}, []):
        with pytest.raises(ValueError):
            PowerState.from_dict(bad)


def test_the_state_file_lives_where_xdg_or_root_says() -> None:
    assert state.location({"XDG_STATE_HOME": "/s"}, 0) == Path("/s/gpuenv/power-state.json")
    assert state.location({}, 0) == Path("/var/lib/gpuenv/power-state.json")
    assert state.location({"HOME": "/home/u"}, 1000) == Path("/home/u/.local/state/gpuenv/power-state.json")
    assert state.location({"XDG_STATE_HOME": "relative", "HOME": "/h"}, 1000) == Path(
        "/h/.local/state/gpuenv/power-state.json"
    )


def test_a_state_folder_others_may_write_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "gpuenv"
    folder.mkdir(mode=0o777)
    os.chmod(folder, 0o777)
    saved = PowerState("tuning", os.getpid(), "now", (SavedLimit(0, None, 700000),))
    with pytest.raises(BadRequest, match="others may write"):
        state.write(folder / state.NAME, saved)
    os.chmod(folder, 0o755)
    state.write(folder / state.NAME, saved)
    assert state.read(folder / state.NAME) == saved
    (folder / state.NAME).write_text("{not json")
    with pytest.raises(BadRequest, match="power state file"):
        state.read(folder / state.NAME)


@pytest.mark.parametrize(("text", "fraction"), [("5%", 0.05), ("5", 0.05), ("0%", 0.0), ("12.5 %", 0.125)])
def test_max_loss_reads_percentages(text: str, fraction: float) -> None:
    assert percent(text) == pytest.approx(fraction)


@pytest.mark.parametrize("text", ["100%", "-5%", "5%%", "five", ""])
def test_a_bad_max_loss_is_a_bad_request(text: str) -> None:
    with pytest.raises(BadRequest):
        percent(text)


def test_a_launch_bound_workload_is_refused_not_tuned() -> None:
    # 150 W of a 700 W limit at full power: lower caps change nothing and "save" only noise
    sweep = [result(700, 1000, 150), result(575, 1000, 148), result(450, 1001, 140), result(325, 999, 130)]
    picked = choose(sweep, max_loss=0.05, original_w=700)
    assert picked.limit_w is None and picked.refused == "launch-bound"
    assert "150 W" in picked.reason and "700 W" in picked.reason and "no cap is chosen" in picked.reason
    loaded = [result(700, 1000, 600), result(450, 960, 450)]
    assert choose(loaded, max_loss=0.05, original_w=700).refused is None
