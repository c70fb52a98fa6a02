"""`gpuenv resolve --fleet DIR` / `--fleet-history DB` through the CLI, over generated fleets."""

from __future__ import annotations

import json

import pytest

from gpuenv.stack_service import load_stack
from tests.conftest import gpuenv_main
from tests.fleet.compat_fleet import FLEET, Spec, write_fleet

# The fleet less the R470 A100 (CUDA 11 only) and the MI300X (ROCm): one CUDA stack runs on all the rest.
CUDA_FLEET = tuple(s for s in FLEET if s.host not in ("a100-001", "mi300x-001"))


def resolved(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert gpuenv_main("resolve", *args, "--json") == 0
    return json.loads(capsys.readouterr().out)


def test_the_newest_stack_every_host_runs_with_the_binding_hosts_named(tmp_path, capsys) -> None:
    folder = str(write_fleet(tmp_path / "fleet", CUDA_FLEET))
    alone = resolved(capsys)
    stack = resolved(capsys, "--fleet", folder)
    assert (stack["torch"], stack["build"]) == ("2.10.0", "cu128") != (alone["torch"], alone["build"])
    binding = stack["reasons"]["fleet"]
    assert binding.startswith(f"torch {alone['torch']}+{alone['build']}, resolve's choice without the fleet, needs:")
    # an image: the data center hosts on branches cuda-compat-13-0 serves (R535, R570) would run cu130 through it
    assert "the driver ≥ 580.65.06 on h100-001,rtx5090-001;" in binding
    on_hosts = resolved(capsys, "--fleet", folder, "--for", "host")["reasons"]["fleet"]
    assert "the driver ≥ 580.65.06 on a100-002,h100-[001-004],rtx5090-001" in on_hosts  # a host stack: its driver
    assert (
        "to leave out v100-[001-002] (its GPU code is sm_75…sm_120 (+PTX 12.0): no kernel for Volta sm_70)" in binding
    )
    assert stack["rejected"] and all(r["why"].startswith("needs: ") for r in stack["rejected"])
    assert any("minor-version compatibility in use" in w and w.endswith("a100-002") for w in stack["warnings"])
    # what it chose, fleet compat finds every host runs
    chosen = tmp_path / "stack.json"
    chosen.write_text(json.dumps(stack))
    load_stack(chosen)  # still a stack file build-image and provision take
    assert gpuenv_main("fleet", "compat", folder, "--stack", str(chosen), "--json") == 0
    assert json.loads(capsys.readouterr().out)["counts"]["no"] == 0


def test_a_fleet_that_binds_nothing_gets_what_resolve_gives(tmp_path, capsys) -> None:
    fleet = tuple(Spec(f"h100-{i}", "NVIDIA H100", "9.0", "580.65.06") for i in range(3))
    stack = resolved(capsys, "--fleet", str(write_fleet(tmp_path, fleet)))
    alone = resolved(capsys)
    assert (stack["torch"], stack["build"]) == (alone["torch"], alone["build"])
    assert stack["reasons"]["fleet"] == "every host of the fleet runs what resolve gives without it (3 host(s))"


def test_no_one_stack_for_the_whole_fleet_names_the_hosts(tmp_path, capsys) -> None:
    folder = str(write_fleet(tmp_path))
    assert gpuenv_main("resolve", "--fleet", folder) == 2
    err = capsys.readouterr().err
    assert "need stacks of different platforms" in err and "rocm: mi300x-001" in err and "--platform" in err
    assert gpuenv_main("resolve", "--fleet", folder, "--platform", "cuda") == 2
    err = capsys.readouterr().err
    assert "no stack runs on every host of the fleet (11 host(s))" in err and "on a100-001,h100-001," in err
    assert gpuenv_main("resolve", "--fleet", folder, "--platform", "cuda", "--for", "host") == 2
    assert "a100-[001-002]" in capsys.readouterr().err  # a host stack: a100-002's R535 does not run CUDA 13.0
    stack = resolved(capsys, "--fleet", folder, "--platform", "rocm")
    assert stack["platform"] == "rocm" and any(
        w.startswith("left out, their GPUs take another") for w in stack["warnings"]
    )


def test_the_history_names_the_fleet_too(tmp_path, capsys) -> None:
    history = tmp_path / "history.sqlite"
    gpuenv_main(
        "fleet", "report", str(write_fleet(tmp_path / "fleet", CUDA_FLEET)), "--history", str(history), "--json"
    )
    capsys.readouterr()
    assert resolved(capsys, "--fleet-history", str(history))["torch"] == "2.10.0"


@pytest.mark.parametrize(
    "args",
    [("--driver", "570.124.06"), ("--stack", "stack.json"), ("--fleet-history", "h.sqlite")],
)
def test_bad_requests(tmp_path, capsys, args: tuple[str, ...]) -> None:
    assert gpuenv_main("resolve", "--fleet", str(write_fleet(tmp_path, CUDA_FLEET)), *args) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_an_image_for_a_geforce_fleet_on_an_older_driver_is_one_its_driver_runs_natively(tmp_path, capsys) -> None:
    """An image's nvidia/cuda base carries cuda-compat, which a GeForce cannot use: resolve's image rule, per host."""
    fleet = tuple(Spec(f"rtx4090-{i}", "NVIDIA GeForce RTX 4090", "8.9", "535.104.05") for i in range(2))
    folder = str(write_fleet(tmp_path, fleet))
    image = resolved(capsys, "--fleet", folder, "--torch", "2.7.0")
    host = resolved(capsys, "--fleet", folder, "--torch", "2.7.0", "--for", "host")
    alone = resolved(capsys, "--torch", "2.7.0", "--for", "host")
    assert host["build"] == alone["build"] != "cu118"  # minor-version compatibility runs it on the host: a caveat
    assert image["build"] == "cu118"  # R535 runs CUDA 11.8 natively; cu126/cu128 would load cuda-compat: error 804
    rejected = {r["choice"]: r["why"] for r in image["rejected"]}
    assert rejected["torch 2.7.0+cu128"] == "needs: the driver ≥ 570.124.06 on rtx4090-[0-1]"  # CUDA 12.8's own
    assert "the driver ≥ 560.35.05 on rtx4090-[0-1]" in image["reasons"]["fleet"]  # cu126, resolve's choice


def test_for_host_judges_each_hosts_os_and_python_as_provision_installs_the_stack(tmp_path, capsys) -> None:
    fleet = (
        Spec("h100-001", "NVIDIA H100", "9.0", "580.65.06"),
        Spec("h100-002", "NVIDIA H100", "9.0", "580.65.06", os="ubuntu20.04", python="3.8"),
    )
    folder = str(write_fleet(tmp_path, fleet))
    stack = resolved(capsys, "--fleet", folder, "--for", "host")
    assert any("deadsnakes" in w and w.endswith("h100-002") for w in stack["warnings"])  # how 3.10 gets there
    assert not any("deadsnakes" in w for w in resolved(capsys, "--fleet", folder)["warnings"])  # an image: its own
    assert gpuenv_main("resolve", "--fleet", folder, "--for", "host", "--os", "ubuntu22.04") == 2
    assert "to leave out h100-002 (the host runs ubuntu20.04, --os asks for ubuntu22.04)" in capsys.readouterr().err
