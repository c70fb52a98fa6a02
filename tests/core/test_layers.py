"""The layering rules of docs/architecture.md, checked on the source so new commands keep them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[2] / "gpuenv" / "cli"
MODULES = sorted(CLI.glob("*.py"))
MAX_FUNCTION_LINES = 40
MAX_MODULE_LINES = 250  # a command's options, help and presentation; more is logic that belongs in a service


def imported_modules(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def long_functions(tree: ast.AST) -> list[str]:
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_the_cli_reaches_adapters_only_through_services(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    direct = sorted(m for m in imported_modules(tree) if m == "gpuenv.adapters" or m.startswith("gpuenv.adapters."))
    assert not direct, f"{path.name} imports {direct}: call the service that wraps the adapter"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_cli_function_is_over_the_limit(path: Path) -> None:
    long = long_functions(ast.parse(path.read_text(encoding="utf-8")))
    assert not long, f"{path.name}: {', '.join(long)}: move the logic into the command's service"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_cli_module_is_over_the_limit(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.name}: {lines} lines: move logic into the command's service"


def test_the_rules_catch_what_they_forbid() -> None:
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    tree = ast.parse(f"from gpuenv.adapters import docker\ndef f():\n{body}\n")
    assert "gpuenv.adapters.docker" in imported_modules(tree)
    assert long_functions(tree) == [f"f ({MAX_FUNCTION_LINES + 1} lines)"]
