"""`gpuenv fleet baseline learn`: medians of the healthy hosts, a file `verify --baseline` reads."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import jsonschema
import pytest

from gpuenv.cli import COMMANDS, CommandEntry, main
from gpuenv.errors import BadRequest
from gpuenv.fleet.baseline import LearnRequest, checked_text, learn_baselines
from gpuenv.resources import data_file
from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.figures import FIGURES
from tests.conftest import run_gpuenv
from tests.fleet import fleet_reports as fr

BASELINES_SCHEMA = json.loads(data_file("schemas/baselines.schema.json").read_text())
A100 = "NVIDIA A100-SXM4-80GB"
ALLREDUCE_512 = ("allreduce", 512 * fr.MiB)


def fleet_folder(tmp_path: Path) -> tuple[Path, list[fr.Node]]:
    """20 healthy H100 nodes, one failed, one with a weak GPU, and 4 A100 nodes (too few)."""
    nodes = fr.fleet(22, seed=11)
    fr.ecc_failure(nodes[0], 0)
    nodes[0].busbw = {k: v * 0.1 for k, v in nodes[0].busbw.items()}  # a failed host's figures never count
    nodes[0].tflops = {k: v * 0.1 for k, v in nodes[0].tflops.items()}
    nodes[1].tflops[4] *= 0.5  # an outlier: left out, its host's other GPUs kept
    a100 = fr.fleet(4, seed=12, prefix="a100-", model=A100)
    return fr.write(nodes + a100, tmp_path / "reports"), nodes


def test_medians_of_the_healthy_hosts_without_outliers(tmp_path: Path) -> None:
    folder, nodes = fleet_folder(tmp_path)
    learned = learn_baselines(LearnRequest((folder,)))
    doc = learned.baselines
    jsonschema.validate(doc, BASELINES_SCHEMA)
    assert (learned.hosts, learned.healthy, learned.left_out_values) == (26, 25, 1)
    healthy = nodes[1:]
    busbw = next(r for r in doc["busbw"] if (r["collective"], r["min_bytes"]) == ALLREDUCE_512)
    assert busbw["match"] == [fr.H100] and busbw["gpus"] == 8 and busbw["samples"] == 21
    assert busbw["busbw_gbps"] == pytest.approx(statistics.median(n.busbw[ALLREDUCE_512] for n in healthy), abs=1e-3)
    kept = [v for n in healthy for i, v in n.tflops.items() if (n.host, i) != ("gpu0001", 4)]
    tflops = next(r for r in doc["matmul_tflops"] if r["shape"] == fr.SHAPES[1])
    assert (tflops["dtype"], tflops["samples"]) == ("bf16", 21 * 8 - 1)
    assert tflops["tflops"] == pytest.approx(statistics.median(kept), abs=1e-3)
    reported = {"amp.matmul_tflops", "amp.energy_per_step_j", "nvml.temperature_c", "nvml.sm_clock_mhz"}
    assert reported <= {f.name for f in FIGURES}  # every figure the reports hold is learned
    assert {r["figure"] for r in doc["figures"]} == reported
    temps = next(r for r in doc["figures"] if r["figure"] == "nvml.temperature_c")
    assert temps["gpus"] == 8 and temps["samples"] == 21 * 8
    assert all(r["match"] == [fr.H100] for table in ("busbw", "matmul_tflops", "figures") for r in doc[table])
    assert any("NVIDIA A100-SXM4-80GB" in n and "4 healthy host(s), under 5" in n for n in learned.notes)


def test_larger_messages_come_first_so_each_size_finds_its_own_row(tmp_path: Path) -> None:
    folder, _ = fleet_folder(tmp_path)
    path = tmp_path / "learned.json"
    path.write_text(checked_text(learn_baselines(LearnRequest((folder,)))))
    baselines = load_baselines(path)  # what `gpuenv verify --baseline` does first
    rows = {(r["collective"], r["min_bytes"]): r["busbw_gbps"] for r in baselines.busbw}
    for (collective, nbytes), value in rows.items():
        assert baselines.expected_busbw(fr.H100, 8, collective, nbytes) == value
    assert baselines.expected_busbw(fr.H100, 4, "allreduce", 512 * fr.MiB) is None
    temps = next(r["value"] for r in baselines.figures if r["figure"] == "nvml.temperature_c")
    assert baselines.expected_figure("nvml.temperature_c", fr.H100, 8) == temps
    shape = fr.SHAPES[0]
    assert baselines.expected_tflops(fr.H100, "bf16", shape) == next(
        r["tflops"] for r in baselines.matmul_tflops if r["shape"] == shape
    )


def test_no_group_with_enough_hosts_is_exit_2_and_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = fr.write(fr.fleet(4), tmp_path / "few")
    with pytest.raises(BadRequest, match="no group has values from 5 healthy host"):
        learn_baselines(LearnRequest((folder,)))
    monkeypatch.setitem(COMMANDS, "fleet-baseline", CommandEntry("gpuenv.cli.fleet_report_cmd:baseline"))
    out = tmp_path / "out.json"
    for args, code in (([str(folder), "-o", str(out)], 2), ([str(folder), "-o", str(out), "--min-hosts", "4"], 0)):
        with pytest.raises(SystemExit) as info:
            main(["fleet-baseline", "learn", *args])
        assert info.value.code == code
        assert out.exists() == (code == 0)
    assert "learned" in capsys.readouterr().err


@pytest.mark.cpu
def test_verify_accepts_the_learned_file(tmp_path: Path) -> None:
    folder, _ = fleet_folder(tmp_path)
    learned = tmp_path / "learned.json"
    learned.write_text(checked_text(learn_baselines(LearnRequest((folder,)))))
    broken = tmp_path / "broken.json"
    broken.write_text(learned.read_text().replace('"fail_below": 0.75', '"fail_below": 1.5'))
    ok = run_gpuenv("verify", "--device", "cpu", "--check", "stack", "--baseline", str(learned), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["verdict"]["certified"]
    bad = run_gpuenv("verify", "--device", "cpu", "--check", "stack", "--baseline", str(broken))
    assert bad.returncode == 2 and "fail_below" in bad.stderr
