"""Cost figures: the user's price over the registered throughput figures, per node and per fleet (pure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpuenv.config import read
from gpuenv.errors import BadRequest
from gpuenv.resources import data_file
from gpuenv.verify.cost import RULES, NodeFigures, cost_figures, cost_table, fleet_costs, report_cost
from gpuenv.verify.figures import BY_NAME, readings
from gpuenv.verify.prices import Price, PriceRow, gpu_price, price_rows, resolve_price
from tests.conftest import run_gpuenv
from tests.verify.conftest import scenario_env, verify_json
from tests.verify.test_catalogue import report_v2

SCHEMA = json.loads(data_file("report.schema.json").read_text())
TABLE = (
    PriceRow("H100", 2.5, "/etc/gpuenv/config.toml:4"),
    PriceRow("H100 NVL", 2.0, "/etc/gpuenv/config.toml:5"),
    PriceRow("p4d.24xlarge", 32.77, "/etc/gpuenv/config.toml:6"),
)
H100 = "NVIDIA H100 80GB HBM3"
AMOUNTS = {r.key: r.amount for r in RULES}
NOT_WORK = {
    "models.nlp_tokens_per_j",  # efficiency: per joule, not per second
    "models.cv_images_per_j",
    "models.cv_compute_images_per_s",  # a diagnostic (each rank without the allreduce), not work a job gets done
}


def amp(tflops: dict[str, float]) -> dict[str, Any]:
    return {"name": "amp", "status": "pass", "metrics": {"matmul_tflops": tflops}}


def test_the_flag_beats_the_instance_type_which_beats_the_gpu_models() -> None:
    flag, _ = resolve_price(per_hour=3.06, instance_type="p4d.24xlarge", table=TABLE, gpu_names=[H100])
    assert flag == Price(3.06, "--price-per-hour", "node")
    instance, _ = resolve_price(per_hour=None, instance_type="p4d.24xlarge", table=TABLE, gpu_names=[H100])
    assert instance is not None and (instance.usd_per_hour, instance.basis) == (32.77, "node")
    assert "config.toml:6" in instance.source
    gpus, note = resolve_price(per_hour=None, instance_type=None, table=TABLE, gpu_names=[H100] * 8)
    assert gpus is not None and note is None
    assert (gpus.usd_per_hour, gpus.basis, gpus.per_device) == (20.0, "gpu", 2.5)
    assert gpus.source.startswith("[prices] H100 × 8 GPU(s)")


def test_no_price_means_no_cost_never_a_default() -> None:
    assert resolve_price(per_hour=None, instance_type=None, table=(), gpu_names=[H100]) == (None, None)
    assert resolve_price(per_hour=None, instance_type=None, table=TABLE, gpu_names=[]) == (None, None)
    price, note = resolve_price(per_hour=None, instance_type="g5.xlarge", table=TABLE, gpu_names=[H100])
    assert price is None and note is not None and "g5.xlarge" in note  # no fallback to the GPU's price
    price, note = resolve_price(per_hour=None, instance_type=None, table=TABLE, gpu_names=[H100, "NVIDIA L4"])
    assert price is None and note is not None and "NVIDIA L4" in note
    assert report_cost({"device": "cuda", "checks": [amp({"0": 500.0})]}, None) is None


def test_the_most_specific_gpu_key_wins() -> None:
    assert gpu_price(TABLE, "NVIDIA H100 NVL") == TABLE[1]
    assert gpu_price(TABLE, "nvidia h100 80gb hbm3") == TABLE[0]
    assert gpu_price(TABLE, "NVIDIA A100-SXM4-80GB") is None


def test_per_gpu_figures_cost_per_device_and_for_the_node() -> None:
    node = Price(10.0, "--price-per-hour", "node")
    [entry] = cost_figures([amp({"0": 400.0, "1": 100.0})], node)
    # the node: 10 USD/h over 500 TFLOP/s; each GPU at half the price over its own rate
    assert entry["value"] == pytest.approx(10.0 / 500)
    assert entry["per_gpu"] == {"0": pytest.approx(5.0 / 400), "1": pytest.approx(5.0 / 100)}
    assert (entry["key"], entry["rate"], entry["rate_unit"]) == ("usd_per_tflop_hour", 500.0, "TFLOP/s")
    per_gpu = Price(20.0, "[prices] H100 × 8 GPU(s)", "gpu", per_device=2.5)
    [partial] = cost_figures([amp({"0": 500.0, "3": 500.0})], per_gpu)  # two GPUs measured: two GPU-hours
    assert partial["per_gpu"] == {"0": 0.005, "3": 0.005} and partial["value"] == 0.005


def test_a_zero_rate_or_a_foreign_metric_gets_no_cost() -> None:
    price = Price(3.06, "--price-per-hour", "node")
    assert cost_figures([amp({"0": 0.0})], price) == []
    assert cost_figures([{"name": "allreduce", "metrics": {"matmul_tflops": {"0": 9.0}}}], price) == []


def test_the_cost_object_says_cpu_figures_are_cpu_figures_and_fits_the_schema() -> None:
    report = report_v2()
    report["device"] = "cpu"
    report["checks"].append({**report["checks"][0], "name": "amp", "metrics": {"matmul_tflops": {"0": 0.06}}})
    cost = report_cost(report, Price(3.06, "--price-per-hour", "node"), instance_type="p3.2xlarge")
    assert cost is not None and "CPU" in cost["note"] and cost["device"] == "cpu"
    assert [f["value"] for f in cost["figures"]] == [51.0]  # 3.06 USD/h over 0.06 TFLOP/s
    report["cost"] = cost
    report["host"]["instance_type"] = "p3.2xlarge"
    jsonschema.validate(report, SCHEMA)
    report["cost"]["figures"][0]["value"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, SCHEMA)


def node(host: str, gpus: list[str], tflops: float, instance_type: str | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {"hostname": host, "gpus": [{"index": i, "name": n} for i, n in enumerate(gpus)]}
    if instance_type:
        info["instance_type"] = instance_type
    return {"host": info, "checks": [amp({str(i): tflops for i in range(len(gpus))})]}


def test_the_fleet_table_puts_node_kinds_side_by_side() -> None:
    reports = [
        node("a1", ["NVIDIA A100-SXM4-80GB"] * 8, 250.0, instance_type="p4d.24xlarge"),
        node("a2", ["NVIDIA A100-SXM4-80GB"] * 8, 230.0, instance_type="p4d.24xlarge"),
        node("h1", [H100] * 8, 600.0),
        node("l1", ["NVIDIA L4"], 100.0),
    ]
    rows = {row.group: row for row in fleet_costs([NodeFigures.from_report(r) for r in reports], TABLE)}
    assert set(rows) == {"p4d.24xlarge", f"8 × {H100}", "1 × NVIDIA L4"}
    p4d = rows["p4d.24xlarge"]
    assert (p4d.nodes, p4d.priced_nodes, p4d.usd_per_hour) == (2, 2, 32.77)
    medians = sorted([32.77 / 2000, 32.77 / 1840])
    assert p4d.costs["usd_per_tflop_hour"] == pytest.approx(sum(medians) / 2, rel=1e-3)
    assert rows[f"8 × {H100}"].costs["usd_per_tflop_hour"] == pytest.approx(20.0 / 4800, rel=1e-3)
    l4 = rows["1 × NVIDIA L4"]
    assert l4.priced_nodes == 0 and l4.costs == {} and l4.note is not None and "NVIDIA L4" in l4.note
    columns, cells = cost_table(list(rows.values()))
    assert columns == ["node kind", "nodes", "USD/h", "per TFLOP/s-hour"]
    assert ["1 × NVIDIA L4", "0/1", "-", "-"] in cells


def test_prices_come_from_the_file_with_their_lines(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[verify]\nlevel = "quick"\n\n[prices]\nH100 = 2.49\n"p4d.24xlarge" = 32.77\n')
    rows = price_rows(read(path, "--config"))
    assert rows == (
        PriceRow("H100", 2.49, f"{path}:5"),
        PriceRow("p4d.24xlarge", 32.77, f"{path}:6"),
    )
    assert price_rows(None) == ()
    path.write_text("[prices]\nH100 = inf\n")
    with pytest.raises(BadRequest, match="positive number"):
        price_rows(read(path, "--config"))


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf", "1e9", "cheap"])
def test_a_bad_price_is_exit_2_before_anything_runs(value: str) -> None:
    result = run_gpuenv("verify", "--device", "cpu", "--price-per-hour", value)
    assert result.returncode == 2, result.stderr
    assert "--price-per-hour" in result.stderr and "Traceback" not in result.stderr


def test_a_bad_instance_type_is_exit_2() -> None:
    result = run_gpuenv("verify", "--device", "cpu", "--instance-type", "p4d;reboot")
    assert result.returncode == 2 and "instance type" in result.stderr


def close(value: float) -> Any:
    return pytest.approx(value, rel=1e-3)  # costs keep 4 significant digits


def models(**metrics: Any) -> dict[str, Any]:
    return {"name": "models", "status": "pass", "metrics": metrics}


def test_every_workload_figure_gets_its_cost() -> None:
    checks = [
        amp({"0": 400.0, "1": 400.0}),
        models(
            nlp_tokens_per_s={"0": 100000.0, "1": 100000.0},
            cv_images_per_s={"0": 2000.0, "1": 2000.0},
            cv_images_per_s_total=3600.0,  # measured together: less than the sum of the GPUs alone
            rec_queries_per_s=500000.0,
            rec_p99_ms=3.0,  # a latency: no cost
            nlp_tokens_per_j={"0": 300.0},  # an efficiency: no cost
        ),
        {"name": "fp8", "status": "pass", "metrics": {"fp8_tflops": {"0": 1000.0, "1": 1000.0}}},
    ]
    costs = {e["figure"]: e for e in cost_figures(checks, Price(36.0, "--price-per-hour", "node"))}
    assert set(costs) == {
        "amp.matmul_tflops",
        "models.nlp_tokens_per_s",
        "models.cv_images_per_s",
        "models.cv_images_per_s_total",
        "models.rec_queries_per_s",
        "fp8.fp8_tflops",
    }
    # 36 USD/h = 0.01 USD/s: a million tokens at 200k tokens/s take 5 s
    assert costs["models.nlp_tokens_per_s"]["value"] == close(0.05)
    assert costs["models.nlp_tokens_per_s"]["per_gpu"] == {"0": close(0.05), "1": close(0.05)}
    assert costs["models.cv_images_per_s_total"]["value"] == close(36.0 * 1e3 / (3600.0 * 3600))
    assert costs["models.cv_images_per_s"]["value"] == close(36.0 * 1e3 / (4000.0 * 3600))
    assert costs["models.rec_queries_per_s"]["value"] == close(0.02)
    assert costs["amp.matmul_tflops"]["value"] == close(36.0 / 800)


def test_every_registered_throughput_figure_is_costed_or_named_as_not() -> None:
    """A new figure counting work per second must get a cost rule, or be listed here with why not."""
    from gpuenv.verify.cost import RULES
    from gpuenv.verify.figures import FIGURES

    costed = {r.figure for r in RULES}
    throughput = {f.name for f in FIGURES if f.better == "higher" and f.unit.endswith("/s")} - NOT_WORK
    bandwidth = {f.name for f in FIGURES if f.unit == "GB/s"}  # a link's speed, not work done
    assert throughput - bandwidth <= costed
    assert costed <= {f.name for f in FIGURES}  # every rule names a registered figure


@pytest.mark.cpu
@pytest.mark.slow
def test_a_deep_cpu_run_with_a_price_costs_every_workload_figure_it_reports() -> None:
    args = ("--device", "cpu", "--level", "deep", "--check", "amp", "--check", "models", "--price-per-hour", "3.06")
    code, report, stderr = verify_json(*args, timeout=600)
    assert code == 0, stderr
    jsonschema.validate(report, SCHEMA)
    reported = {r.figure.name for r in readings(report["checks"])}
    per_second = {name for name in reported if BY_NAME[name].unit.endswith("/s") and BY_NAME[name].better == "higher"}
    throughput = per_second - NOT_WORK
    assert {"amp.matmul_tflops", "models.nlp_tokens_per_s", "models.cv_images_per_s"} <= throughput
    cost = report["cost"]
    assert cost["price"] == {
        "usd_per_hour": 3.06,
        "source": "--price-per-hour",
        "basis": "node",
        "usd_per_gpu_hour": None,
    }
    assert {f["figure"] for f in cost["figures"]} == throughput and cost["device"] == "cpu" and "CPU" in cost["note"]
    for entry in cost["figures"]:  # the price over the measured rate, to the 4 digits kept
        assert entry["value"] == close(3.06 * AMOUNTS[entry["key"]] / (entry["rate"] * 3600))


def test_the_config_files_prices_reach_the_report(tmp_path: Path, fake_nvml_dir: Path) -> None:
    """[prices] by GPU model, read through the real CLI, over eight fake H100s; an instance type
    without a price gives no cost, and says so."""
    config = tmp_path / "config.toml"
    config.write_text('[prices]\nH100 = 2.49\n"p4d.24xlarge" = 32.77\n')
    env = scenario_env(fake_nvml_dir, "healthy-8xh100")
    by_model = run_gpuenv("--config", str(config), "verify", "--check", "stack", "--json", env=env, timeout=300)
    cost = json.loads(by_model.stdout)["cost"]
    assert cost["price"]["usd_per_hour"] == pytest.approx(8 * 2.49) and cost["price"]["basis"] == "gpu"
    assert cost["price"]["source"] == f"[prices] H100 × 8 GPU(s) ({config.resolve()}:2)"
    assert cost["figures"] == []  # the stack check measures no throughput
    args = ("--config", str(config), "verify", "--check", "stack", "--instance-type", "g5.xlarge", "--json")
    unpriced = run_gpuenv(*args, env=env, timeout=300)
    report = json.loads(unpriced.stdout)
    assert "cost" not in report and report["host"]["instance_type"] == "g5.xlarge"
    assert "no price for instance type 'g5.xlarge' in [prices]" in unpriced.stderr
