"""The optional extras: which library comes with which `gpuenv[X]`, and the one way to say one is missing.

Every import of an optional library goes through `need` (a module, by name) or `needed` (around a typed
`import` statement), so a missing extra is always the same one line and hint with exit 3:
`ansible-runner is not installed ... hint: pip install 'gpuenv[ansible]'`, never a crash.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from gpuenv.errors import CannotRun

# the importable top-level module -> (the extra that installs it, the distribution's name)
EXTRAS: dict[str, tuple[str, str]] = {
    "yaml": ("ansible", "PyYAML"),
    "ansible_runner": ("ansible", "ansible-runner"),
    "docker": ("docker", "the Docker SDK"),
    "requests": ("docker", "requests"),
    "httpx": ("kb", "httpx"),
    "hostlist": ("slurm", "python-hostlist"),
    "matplotlib": ("report", "matplotlib"),
    "pynvml": ("verify", "nvidia-ml-py"),
    "torch": ("verify", "torch"),
    "numpy": ("verify", "numpy"),
    "onnx": ("onnx", "onnx"),
    "onnxscript": ("onnx", "onnxscript"),
    "onnxruntime": ("onnx", "onnxruntime"),
}


def install_hint(extra: str) -> str:
    """The one hint for a missing extra."""
    return f"pip install 'gpuenv[{extra}]'"


def missing(module: str, purpose: str) -> CannotRun:
    """The error for an optional library that is not installed (exit 3, the extra's install hint)."""
    root = module.split(".")[0]
    extra, distribution = EXTRAS[root]
    return CannotRun(f"{purpose} needs {distribution}, which is not installed", hint=install_hint(extra))


def need(module: str, purpose: str) -> ModuleType:
    """Import an optional library by name, or CannotRun naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing(module, purpose) from exc


@contextmanager
def needed(module: str, purpose: str) -> Iterator[None]:
    """Around the `import` statements of an optional library (typed imports stay typed): an ImportError
    in the block is CannotRun naming the extra that installs `module`."""
    try:
        yield
    except ImportError as exc:
        raise missing(module, purpose) from exc
