"""The GPU tests hold no CUDA context between tests: tests/verify/test_gpu.py never imports torch
itself (its torch work runs in child processes)."""

from __future__ import annotations

import ast
from pathlib import Path


def test_the_gpu_tests_never_import_torch_in_the_test_process() -> None:
    tree = ast.parse((Path(__file__).parent / "test_gpu.py").read_text())
    imported = [
        alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names
    ] + [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [name for name in imported if name == "torch" or name.startswith("torch.")]
