"""What the sweep tests share (test_sweep_nvml.py, test_sweep_amd.py): the nvml check run in this
process over a fake GPU library, with one GPU made to answer one error code to one call, at idle or
only while the load runs, and the verdict that must follow from the code's class.

The cases are generated from the adapters' error tables (gpuenv/adapters/*_errors.py): for every
call the check makes, every code the table calls lost or normal for it and a sample of failures.
The fake library's trace (FAKE_*_TRACE) proves the tables name every call a run makes, so a call
nobody listed cannot escape the sweep."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuenv.types import ErrorClass
from gpuenv.verify.checks.nvml.under_load import Load
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult
from gpuenv.verify.options import VerifyOptions
from gpuenv.verify.passive import host_facts, watched

GPUS = 4  # the faulty GPU and three peers of its model (enough for the peer comparison)
FAULTY = 3
MODES = ("passive", "check", "under load")  # the Slurm epilog's read; the check (idle and load); load only
# Fast sampling for the sweep: two samples, no wait between them
POLICY = '{"schema": "gpuenv.nvml-policy/1", "load_sampling": {"quick": {"samples": 2, "interval_s": 0}}}'


@dataclass(frozen=True)
class Case:
    call: str
    code: str  # the library's name for it
    value: int  # the return code the fake answers
    klass: ErrorClass
    mode: str
    node: bool  # a call that takes no GPU (the driver version, the count, the event set)

    @property
    def id(self) -> str:
        return f"{self.mode}:{self.call}:{self.code}"

    def scenario(self, base: str) -> str:
        key = ("node_" if self.node else f"gpu{FAULTY}.") + ("errors_load" if self.mode == "under load" else "errors")
        return f"{base}{key}={self.call}:{self.value}\n"


def cases(
    table: dict[str, frozenset[str]],
    values: dict[str, int],
    classify: Callable[[str, str], ErrorClass],
    *,
    lost: frozenset[str],
    failures: tuple[str, ...],
    node: frozenset[str],
    only_under_load: frozenset[str],
    made_under_load: frozenset[str],
) -> list[Case]:
    """Every call of `table` x (each lost code, each of its normal answers, the sample `failures`
    not normal for it) x every mode whose run makes the call."""
    found = []
    for call, normal in table.items():
        for code in sorted(lost | normal | (set(failures) - normal)):
            for mode in MODES:
                made = (
                    made_under_load
                    if mode == "under load"
                    else table.keys() - (only_under_load if mode == "passive" else set())
                )
                if call in made:
                    found.append(Case(call, code, values[code], classify(call, code), mode, call in node))
    return found


@contextlib.contextmanager
def marker_load(marker: Path) -> Iterator[Load]:
    """The stand-in load, in this process: the fake answers its under-load values while the
    marker exists."""
    marker.touch()
    try:
        yield Load()
    finally:
        marker.unlink()


def run_check(mode: str, tmp: Path, expect_gpus: int = GPUS) -> CheckResult:
    """The nvml check as `mode` runs it, in this process (the caller has pointed the fake at its
    scenario): the engine's probe, the check, the XID watch around it."""
    policy = tmp / "policy.json"
    policy.write_text(POLICY)
    opts = VerifyOptions(policy=str(policy), expect_gpus=expect_gpus)
    ctx = CheckContext(level="quick", device="cuda", expect_gpus=expect_gpus, policy=str(policy), host=host_facts(opts))
    return watched(ctx, passive=mode == "passive", start_load=lambda _hold: marker_load(tmp / "load-marker"))


def problems(result: CheckResult) -> list[tuple[str, str, int | None, str]]:
    return [
        (f.severity, f.action, f.gpu.index if f.gpu else None, f.message)
        for f in result.findings
        if f.severity != "info"
    ]


def assert_judged(case: Case, result: CheckResult) -> None:
    """A lost GPU fails, naming it, action drain; a failed call warns at least, naming the GPU, the
    call and its code; a normal answer leaves the healthy GPU certified."""
    seen = problems(result)
    mine = [p for p in seen if case.node or p[2] == FAULTY]
    if case.klass == "lost":
        assert result.status == "fail" and any(s == "fail" and a == "drain" for s, a, _, _ in mine), seen
    elif case.klass == "failed":
        named = [p for p in mine if case.call in p[3] and case.code in p[3]]
        assert result.status in ("warn", "fail") and named, seen
    else:
        assert result.status == "pass", seen


def calls_traced(trace: Path, when: str | None = None) -> set[str]:
    """The calls a run made (by the name the bindings give them: no version suffix), at `when`
    ("idle" or "load") or at any time."""
    lines = [line.split() for line in trace.read_text().splitlines()] if trace.exists() else []
    return {bare(call) for call, at in lines if when in (None, at)}


def bare(name: str) -> str:
    """A function's name without its version suffix (nvmlDeviceGetCount_v2 is nvmlDeviceGetCount)."""
    head, _, version = name.rpartition("_v")
    return head if head and version.isdigit() else name


def with_names(table: dict[str, Any]) -> set[str]:
    return {bare(call) for call in table}
