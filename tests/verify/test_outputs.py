"""gpuenv.output: the renderers' registry, the JSON writer's null for non-finite figures, and the
screens the CLI draws (text shown as is, never read as Rich markup)."""

from __future__ import annotations

import ast
import io
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gpuenv import output
from gpuenv.cli.output import draw, emit_json
from gpuenv.output.html import to_html
from gpuenv.output.jsontext import finite, json_text
from gpuenv.output.junit import to_junit
from gpuenv.output.screen import Screen, Table
from gpuenv.output.verify import to_job_summary, to_json
from gpuenv.verify.catalogue import finding
from gpuenv.verify.model import CheckResult, Report, decide

OUTPUT = Path(output.__file__).parent


def report(metrics: dict[str, Any], *findings_: Any) -> Report:
    checks = [CheckResult("memory", "fail" if findings_ else "pass", 1.5, "done", metrics, list(findings_))]
    return Report(
        level="standard",
        device="cuda",
        cpu_only=False,
        started="2026-11-30T15:04:05+00:00",
        finished="2026-11-30T15:05:05+00:00",
        gpuenv_version="0.1.0",
        host={"hostname": "gpu01"},
        stack={},
        checks=checks,
        verdict=decide(checks, strict=False, cpu_only=False, interrupted=None),
        multi_node={"node": 0},
    )


def strict_loads(text: str) -> Any:
    """JSON as strict readers take it: NaN, Infinity and -Infinity are errors."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_every_registered_format_is_a_function_of_its_subject() -> None:
    for subject, formats in output.FORMATS.items():
        assert {"table", "json", "prometheus"} <= set(formats), subject
        for fmt in formats:
            assert callable(output.renderer(subject, fmt)), (subject, fmt)
    assert output.renderer("verify", "json") is to_json
    assert output.renderer("verify", "junit") is to_junit
    assert output.renderer("verify", "job-summary") is to_job_summary
    assert output.renderer("fleet", "html") is to_html
    with pytest.raises(KeyError):
        output.renderer("verify", "yaml")


def test_text_and_screen_keep_their_kinds_apart() -> None:
    done = report({})
    assert isinstance(output.screen("verify", done)[0], Table)
    assert output.text("verify", "junit", done).startswith('<?xml version="1.0"')
    with pytest.raises(TypeError, match="drawn, not text"):
        output.text("verify", "table", done)


NON_FINITE = {
    "checkpoint_saving_gib": math.nan,
    "headroom": {"by_batch": [1.5, math.inf, {"peak": -math.inf}], "pair": (math.nan, 2)},
    "fine": 0.25,
}


def test_the_report_writes_null_for_every_non_finite_figure(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    output.write("verify", "json", report(NON_FINITE), target)
    metrics = strict_loads(target.read_text())["checks"][0]["metrics"]
    assert metrics == {
        "checkpoint_saving_gib": None,
        "headroom": {"by_batch": [1.5, None, {"peak": None}], "pair": [None, 2]},
        "fine": 0.25,
    }
    summary = strict_loads(output.text("verify", "job-summary", report(NON_FINITE)))
    assert summary["written_by"]["node"] == 0


def test_finite_documents_are_written_as_before() -> None:
    document = {"a": [1, 2.5, None, "x"], "b": {"c": True}}
    assert json_text(document) == json.dumps(document, indent=2) + "\n"
    assert finite(document) == document


def test_nothing_non_finite_can_be_written_as_a_literal() -> None:
    class Odd(float):  # a float subclass (numpy's float64 is one) still becomes null
        pass

    assert strict_loads(json_text({"x": Odd("nan")})) == {"x": None}
    with pytest.raises(ValueError):  # a non-finite key is refused, not written as NaN
        json_text({math.nan: 1})


def test_every_json_on_stdout_goes_through_the_same_writer(capsys: pytest.CaptureFixture[str]) -> None:
    emit_json({"figure": math.nan})
    assert strict_loads(capsys.readouterr().out) == {"figure": None}


def drawn(screen: Screen) -> str:
    console = Console(file=io.StringIO(), width=200, highlight=False)
    draw(screen, console)
    text = console.file.getvalue()
    assert isinstance(text, str)
    return text


def test_text_on_the_terminal_is_never_read_as_markup() -> None:
    # Drawn as Rich markup before, the remediation lost its "[onnx]" and "[/]" stopped the run.
    broken = finding("onnx.export-failed", "export failed: [/] in the graph [bold]")
    text = drawn(output.screen("verify", report({}, broken)))
    assert "fix: install onnx and onnxscript versions that match torch (pip install 'gpuenv[onnx]')" in text
    assert "fail memory: export failed: [/] in the graph [bold]" in text


def test_the_renderers_import_neither_the_cli_nor_rich_nor_click() -> None:
    for path in sorted(OUTPUT.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert name.split(".")[0] not in ("rich", "click"), f"{path.name} imports {name}"
                assert not name.startswith("gpuenv.cli"), f"{path.name} imports {name}"


def test_rendering_a_report_loads_no_heavy_module() -> None:
    code = (
        "import sys; from gpuenv import output; import gpuenv.output.verify, gpuenv.output.fleet; "
        "heavy = {'torch', 'numpy', 'matplotlib', 'rich', 'jinja2'} & set(sys.modules); assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
