"""The layering rules of docs/architecture.md, checked on the source of the whole package."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gpuenv"
CLI = PACKAGE / "cli"
ALL_MODULES = sorted(PACKAGE.rglob("*.py"))
CLI_MODULES = sorted(CLI.glob("*.py"))
MAX_FUNCTION_LINES = 40  # a cli function: parse, call one service, present
MAX_CLI_MODULE_LINES = 250  # a command's options, help and presentation; more is logic that belongs in a service
MAX_MODULE_LINES = 450  # past this a module is several things: split it along its seams

# What a function may import lazily: modules that are slow to import (jinja2 and rich stay off `--help` and
# `resolve`) or come with an optional extra, and gpuenv's own modules that import one of them at their top.
# (The adapters import their library inside their calls, so they are imported at the top like any module.)
LAZY_ALLOWED = frozenset(
    {
        "torch", "numpy", "pynvml", "amdsmi", "docker", "ansible_runner", "yaml", "httpx", "matplotlib", "onnx",
        "onnxscript", "onnxruntime", "hostlist", "rich", "jinja2", "orjson", "jsonschema", "requests",
    }
)  # fmt: skip
# Standard modules kept off every command's start-up (bench/bench_nvml_passive.py and bench_info.py time it):
# each costs a millisecond or more, and only an error, --debug, -v/-q or a config file needs them.
OFF_START_UP = frozenset({"difflib", "traceback", "logging", "tomllib", "tomli"})
# Packages that hold services (application logic that drives adapters): an adapter imports none of them.
SERVICE_PACKAGES = (
    "gpuenv.provision", "gpuenv.fleet", "gpuenv.verify", "gpuenv.slurm", "gpuenv.power", "gpuenv.image",
    "gpuenv.kb.refresh", "gpuenv.stack_service", "gpuenv.cli",
)  # fmt: skip


# A vendor or architecture branch, outside gpuenv/platforms and gpuenv/adapters: a comparison or startswith against
# a vendor's or an architecture's literal, or an if/while/conditional/comprehension test that holds one or reads a
# vendor-named name or attribute (facts.amd_gpus, RocmPlatform), or an isinstance check of a vendor-named class.
# torch's device type "cuda" is no vendor branch ("cuda" counts only compared with a platform); renaming a branch
# does not remove it. Each module that keeps some is listed with its count and why; the count is exact, so a branch
# added fails and a branch removed lowers the number here.
VENDOR_LITERAL = re.compile(r"^(rocm|amd|nvml|nvidia|hip|10de|1002|0x10de|0x1002|cu\d|aarch64|arm64|sbsa|x86_64)", re.I)
PLATFORM_LITERALS = {"cuda", "rocm", "cpu"}
VENDOR_NAME = re.compile(
    r"(^|_)(amd|amds?mi|rocm|nvidia|nvml|hip|aarch64|arm64|sbsa|x86)(_|$|gpus?$)|^(Rocm|Amd|Nvidia|Nvml)|^is_amd$", re.I
)
SEAM = (PACKAGE / "platforms", PACKAGE / "adapters")
VENDOR_BRANCHES_ALLOWED: dict[str, tuple[int, str]] = {
    "cli/resolve_cmd.py": (1, "`matrix --rocm`: the flag that shows ROCm's tables (gpuenv.platforms.rocm.tables)"),
    "kb/load.py": (3, "the knowledge base's ROCm tables, checked when a file is loaded"),
    "kb/model.py": (1, "the knowledge base's AMD GPU table, looked up by any of a GPU's names"),
    "fleet/report_hosts.py": (3, "report wire names: a verify report's AMD GPU model picks AMD's remediations"),
    "fleet/report_model.py": (1, "report wire names: a verify report's GPU model names its vendor"),
    "fleet/report_reading.py": (2, "report wire names: the health check's smi (amdsmi) and an unknown AMD GPU"),
    "kb/derive.py": (1, "the refresh reads the CUDA runtime PyPI's plain torch requires (nvidia-cuda-runtime-cu12)"),
    "kb/refresh.py": (
        2,
        "the refresh's sources: x86_64 wheels on PyPI (aarch64: next issue), no ROCm rows in old files",
    ),
    "provision/hostfacts.py": (1, "report wire names: provision's JSON carries an AMD host's loaded amdgpu"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def absolute(node: ast.ImportFrom, path: Path) -> str:
    """The module an ImportFrom names, with relative imports resolved against the importing file."""
    if not node.level:
        return node.module or ""
    base = module_name(path).split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def imports(tree: ast.AST, path: Path) -> Iterator[tuple[ast.stmt, set[str]]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield node, {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = absolute(node, path)
            yield node, {module} | {f"{module}.{alias.name}" for alias in node.names}


def imported_modules(tree: ast.AST, path: Path = PACKAGE / "x.py") -> set[str]:
    return {name for _, names in imports(tree, path) for name in names}


def under(name: str, prefixes: tuple[str, ...] | frozenset[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def function_imports(tree: ast.AST, path: Path) -> Iterator[tuple[ast.stmt, set[str]]]:
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from imports(fn, path)


def module_path(name: str) -> Path | None:
    base = PACKAGE.parent.joinpath(*name.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def top_level_imports(tree: ast.Module, path: Path) -> Iterator[str]:
    """What importing the module runs: imports outside functions, classes and `if TYPE_CHECKING:`."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield from next(imports(node, path))[1]
        stack.extend(ast.iter_child_nodes(node))


def heavy_at_top(name: str) -> bool:
    """Whether gpuenv's module `name` imports a heavy module or an extra when it is imported."""
    path = module_path(name)
    tree = parsed(path) if path else None
    return isinstance(tree, ast.Module) and any(
        m.split(".")[0] in LAZY_ALLOWED for m in top_level_imports(tree, path or PACKAGE)
    )


def lazy_allowed(name: str) -> bool:
    root = name.split(".")[0]
    if root != "gpuenv":
        return root in LAZY_ALLOWED or root in OFF_START_UP
    return heavy_at_top(name)


def lazy_import_problems(source: str, path: Path) -> list[str]:
    """Function-level imports that are not of a heavy module or extra, or that do not say why."""
    lines = source.splitlines()
    problems = []
    seen: set[int] = set()
    for node, names in function_imports(ast.parse(source), path):
        if node.lineno in seen:
            continue
        seen.add(node.lineno)
        # `from a.b import c` names a.b and a.b.c; c may be a module or a name in a.b
        allowed = any(lazy_allowed(n) for n in names)
        end = node.end_lineno or node.lineno
        said = any("#" in lines[i - 1] for i in range(node.lineno, end + 1))
        if not allowed:
            problems.append(f"line {node.lineno}: {lines[node.lineno - 1].strip()} (import it at the top)")
        elif not said:
            problems.append(f"line {node.lineno}: {lines[node.lineno - 1].strip()} (say why on the line)")
    return problems


def long_functions(tree: ast.AST) -> list[str]:
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def _vendor_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(VENDOR_LITERAL.match(node.value))
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_vendor_literal(e) for e in node.elts)


def _names_read(node: ast.AST) -> Iterator[str]:
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            yield n.id
        elif isinstance(n, ast.Attribute):
            yield n.attr


def _platform_compare(operands: list[ast.expr]) -> bool:
    """ "cuda", "rocm" or "cpu" compared with something named platform: a platform branch, not torch's device type."""
    literal = any(isinstance(o, ast.Constant) and o.value in PLATFORM_LITERALS for o in operands)
    return literal and any("platform" in name.lower() for o in operands for name in _names_read(o))


def vendor_branches(tree: ast.AST) -> set[int]:
    """The lines that hold a vendor or architecture branch (one per line, however many it holds)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_vendor_literal(o) for o in operands) or _platform_compare(operands):
                lines.add(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "endswith") and any(_vendor_literal(a) for a in node.args):
                lines.add(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            lines |= {node.lineno} if any(VENDOR_NAME.search(n) for n in _names_read(node.args[-1])) else set()
        tests = [node.test] if isinstance(node, (ast.If, ast.While, ast.IfExp)) else []
        tests += node.ifs if isinstance(node, ast.comprehension) else []
        for test in tests:
            if any(VENDOR_NAME.search(n) for n in _names_read(test)) or any(_vendor_literal(n) for n in ast.walk(test)):
                lines.add(test.lineno)
    return lines


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports, wherever (functions and
    `if TYPE_CHECKING:` included): `from a import b` is a.b when that is a module, else a."""
    modules = {module_name(p): p for p in ALL_MODULES}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node, names in imports(parsed(path), path):
            if isinstance(node, ast.ImportFrom):
                module = absolute(node, path)
                submodules = {n for n in names - {module} if n in modules}
                reads_module = len(submodules) < len(node.names)
                found |= submodules | ({module} if reads_module and module in modules else set())
            else:
                found |= {n for n in names if n in modules}
        graph[name] = found - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: list[str] = []
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        on_stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = on_stack[on_stack.index(node) :]
                    del on_stack[on_stack.index(node) :]
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                on_stack.append(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def parsed(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"))


def ids(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


@pytest.mark.parametrize("path", CLI_MODULES, ids=ids)
def test_the_cli_reaches_adapters_only_through_services(path: Path) -> None:
    direct = sorted(m for m in imported_modules(parsed(path), path) if under(m, ("gpuenv.adapters",)))
    assert not direct, f"{path.name} imports {direct}: call the service that wraps the adapter"


@pytest.mark.parametrize("path", CLI_MODULES, ids=ids)
def test_no_cli_function_is_over_the_limit(path: Path) -> None:
    long = long_functions(parsed(path))
    assert not long, f"{path.name}: {', '.join(long)}: move the logic into the command's service"


@pytest.mark.parametrize("path", CLI_MODULES, ids=ids)
def test_no_cli_module_is_over_the_limit(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_CLI_MODULE_LINES, f"{path.name}: {lines} lines: move logic into the command's service"


@pytest.mark.parametrize("path", ALL_MODULES, ids=ids)
def test_no_module_is_over_the_limit(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{ids(path)}: {lines} lines: split it along its seams"


@pytest.mark.parametrize("path", [p for p in ALL_MODULES if CLI not in p.parents], ids=ids)
def test_click_stays_in_the_cli(path: Path) -> None:
    found = sorted(m for m in imported_modules(parsed(path), path) if under(m, ("click",)))
    assert not found, f"{ids(path)} imports {found}: options are parsed in gpuenv/cli only"


@pytest.mark.parametrize("path", [p for p in ALL_MODULES if CLI not in p.parents], ids=ids)
def test_only_the_entry_point_imports_the_cli(path: Path) -> None:
    found = sorted(m for m in imported_modules(parsed(path), path) if under(m, ("gpuenv.cli",)))
    allowed = path == PACKAGE / "__main__.py"
    assert allowed or not found, f"{ids(path)} imports {found}: the core returns data, the cli presents it"


@pytest.mark.parametrize("path", sorted((PACKAGE / "adapters").glob("*.py")), ids=ids)
def test_adapters_import_no_service(path: Path) -> None:
    found = sorted(m for m in imported_modules(parsed(path), path) if under(m, SERVICE_PACKAGES))
    assert not found, f"{ids(path)} imports {found}: an adapter is the edge; services call it, not the reverse"


@pytest.mark.parametrize("path", ALL_MODULES, ids=ids)
def test_function_level_imports_are_heavy_or_optional_and_say_why(path: Path) -> None:
    problems = lazy_import_problems(path.read_text(encoding="utf-8"), path)
    assert not problems, f"{ids(path)}:\n  " + "\n  ".join(problems)


def test_the_rules_catch_what_they_forbid() -> None:
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    path = PACKAGE / "adapters" / "x.py"
    tree = ast.parse(f"from gpuenv.adapters import docker\nfrom ..fleet import run\ndef f():\n{body}\n")
    assert {"gpuenv.adapters.docker", "gpuenv.fleet.run"} <= imported_modules(tree, path)
    assert long_functions(tree) == [f"f ({MAX_FUNCTION_LINES + 1} lines)"]
    lazy = (
        "def f():\n"
        "    import torch  # heavy: only the workload needs it\n"
        "    import statistics\n"
        "    from gpuenv.verify import ranks\n"
        "    from gpuenv.errors import BadRequest  # why\n"
    )
    assert lazy_import_problems(lazy, path) == [
        "line 3: import statistics (import it at the top)",
        "line 4: from gpuenv.verify import ranks (import it at the top)",
        "line 5: from gpuenv.errors import BadRequest  # why (import it at the top)",
    ]


@pytest.mark.parametrize("path", [p for p in ALL_MODULES if not any(s in p.parents for s in SEAM)], ids=ids)
def test_vendor_branches_live_in_the_platforms_and_the_adapters(path: Path) -> None:
    found = sorted(vendor_branches(parsed(path)))
    allowed, why = VENDOR_BRANCHES_ALLOWED.get(ids(path), (0, ""))
    source = path.read_text(encoding="utf-8").splitlines()
    listed = "\n  ".join(f"line {n}: {source[n - 1].strip()}" for n in found)
    assert len(found) == allowed, (
        f"{ids(path)} holds {len(found)} vendor or architecture branch(es), allowed {allowed} ({why or 'none'}): "
        f"ask the stack's, request's or host's platform (gpuenv.platforms.registry) instead; or, having removed "
        f"one, lower the allowance\n  {listed}"
    )


def test_the_allowances_name_modules_that_exist_and_stay_within_the_target() -> None:
    assert all((PACKAGE / name).is_file() for name in VENDOR_BRANCHES_ALLOWED)
    assert sum(n for n, _ in VENDOR_BRANCHES_ALLOWED.values()) <= 15


def test_the_vendor_branch_rule_catches_what_it_forbids() -> None:
    branches = (
        'x = stack.platform == "rocm"',
        'if build.startswith("cu12"): pass',
        "if facts.amd_gpus: pass",
        "y = [g for g in gpus if g.is_amd]",
        "ok = isinstance(p, RocmPlatform)",
        'z = 1 if arch == "aarch64" else 2',
        'w = vendor in ("10de", "1002")',
        'if facts.gpus_of("rocm"): pass',
        'v = platform != "cpu"',
    )
    for line in branches:
        assert vendor_branches(ast.parse(line)) == {1}, line
    fine = (
        'x = device == "cuda"',
        'torch.device("cuda")',
        "if platform.host.pci_vendor is None: pass",
        'y = "rocm" + v',
    )
    for line in fine:
        assert vendor_branches(ast.parse(line)) == set(), line


def test_no_import_cycle_in_the_package_type_only_imports_included() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles (break each: move the shared type below both):\n  " + "\n  ".join(map(str, found))


def test_the_cycle_rule_catches_what_it_forbids() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
