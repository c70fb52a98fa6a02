"""Wall-clock timing for the bench scripts: commands measured interleaved in one run, medians compared.

These machines are noisy, so a bench never quotes absolute seconds as its target: it compares
commands measured side by side and prints the ratio. A bench that starts gpuenv from the checkout
calls compile_package first.
"""

from __future__ import annotations

import compileall
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gpuenv"
FAKE_NVML = PACKAGE.parent / "tests" / "verify" / "fake_nvml"


def compile_package() -> None:
    """Compile gpuenv's bytecode, as installing gpuenv does. A checkout run with PYTHONDONTWRITEBYTECODE
    set (as the test machines have it) would otherwise compile every module it imports at each start,
    a cost no installed gpuenv pays (and the bulk of what the rows before 2026-12-02's last read)."""
    compileall.compile_dir(PACKAGE, quiet=1)


def wall(cmd: Sequence[str], *, timeout: float = 600, env: dict[str, str] | None = None) -> float:
    """Seconds one run of cmd takes, to the microsecond; a failing command is an error, not a fast result.

    The wait blocks in waitpid and a timer kills the command at the timeout. Not subprocess.run's
    timeout: its wait polls with sleeps that double up to 50 ms, so every time it gave was 63.5,
    113.5, 163.5 ... ms plus a little (a 34 ms command read 64 ms)."""
    start = time.perf_counter()
    proc = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    try:
        code = proc.wait()
    finally:
        killer.cancel()
    elapsed = time.perf_counter() - start
    if elapsed >= timeout:
        raise subprocess.TimeoutExpired(list(cmd), timeout)
    if code != 0:
        raise subprocess.CalledProcessError(code, list(cmd))
    return elapsed


def samples(
    commands: dict[str, Sequence[str]],
    *,
    runs: int,
    warmup: int = 1,
    env: dict[str, str] | None = None,
    most: dict[str, int] | None = None,
) -> dict[str, list[float]]:
    """Wall times of each command, run interleaved so that drifts in load hit all alike; `most` caps
    the runs of a slow command that is measured for scale only."""
    for _ in range(warmup):  # page cache, .pyc files
        for cmd in commands.values():
            wall(cmd, env=env)
    found: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, cmd in commands.items():
            if len(found[name]) < (most or {}).get(name, runs):
                found[name].append(wall(cmd, env=env))
    return found


def median_each(times: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in times.items()}


def medians(commands: dict[str, Sequence[str]], *, runs: int, warmup: int = 1) -> dict[str, float]:
    """Median wall time of each command, run interleaved."""
    return median_each(samples(commands, runs=runs, warmup=warmup))


def fake_nvml(folder: Path, scenario: str = "healthy-8xh100") -> dict[str, str]:
    """Build the fake libnvidia-ml.so.1 (tests/verify/fake_nvml) into folder; the environment that loads it."""
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-o", str(folder / "libnvidia-ml.so.1"), str(FAKE_NVML / "fake_nvml.c")],
        check=True,
        timeout=120,
    )
    return {**os.environ, "LD_LIBRARY_PATH": str(folder), "FAKE_NVML_SCENARIO": str(FAKE_NVML / f"{scenario}.scenario")}


def report(name: str, measured: float, floor: float, target: float) -> bool:
    """Print one ratio line; True when within target."""
    ratio = measured / floor
    verdict = "ok" if ratio <= target else "OVER TARGET"
    print(f"{name}: {measured:.3f}s vs {floor:.3f}s -> ratio {ratio:.2f} (target <= {target}) {verdict}")
    return ratio <= target
