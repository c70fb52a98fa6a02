"""Wall-clock timing for the bench scripts: commands measured interleaved in one run, medians compared.

These machines are noisy, so a bench never quotes absolute seconds as its target: it compares
commands measured side by side and prints the ratio.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Sequence


def wall(cmd: Sequence[str], *, timeout: float = 600, env: dict[str, str] | None = None) -> float:
    """Seconds one run of cmd takes; a failing command is an error, not a fast result."""
    start = time.perf_counter()
    subprocess.run(
        list(cmd), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout, env=env
    )
    return time.perf_counter() - start


def medians(commands: dict[str, Sequence[str]], *, runs: int, warmup: int = 1) -> dict[str, float]:
    """Median wall time of each command, run interleaved so that drifts in load hit all alike."""
    for _ in range(warmup):
        for cmd in commands.values():
            wall(cmd)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, cmd in commands.items():
            samples[name].append(wall(cmd))
    return {name: statistics.median(values) for name, values in samples.items()}


def report(name: str, measured: float, floor: float, target: float) -> bool:
    """Print one ratio line; True when within target."""
    ratio = measured / floor
    verdict = "ok" if ratio <= target else "OVER TARGET"
    print(f"{name}: {measured:.3f}s vs {floor:.3f}s -> ratio {ratio:.2f} (target <= {target}) {verdict}")
    return ratio <= target
