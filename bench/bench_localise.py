"""The localisation's added wall time on 8 CPU ranks at `deep`, in the same runs as the check it adds to.

Eight single-rank "nodes" (each its own `gpuenv verify --check allreduce --level deep --device cpu`
process under torchrun's environment, as tests/verify/spread_nodes.py starts them): a healthy run, a
slow node (rank 5, the test seam's allreduce:slow) and a slow link (ranks 2-5, allreduce:slowlink).
For each: what creating the groups took (`setup_s`) and the rounds (`seconds`), both measured by the
ranks themselves, against the allreduce check's own time in the same run; the rounds and what was
named. Targets: the right node or link named, within deep's budget (rounds and seconds), and the
healthy run's added time at most 10% of the check's. Exits 1 when one is missed.
Usage: .venv/bin/python bench/bench_localise.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from timing import compile_package

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.verify.spread_nodes import run_nodes

NODES = 8
SCENARIOS = {
    "healthy": ("", "nothing slow", []),
    "slow node (rank 5)": ("allreduce:slow:rank5", "slow node", ["n6"]),
    "slow link (ranks 2-5)": ("allreduce:slowlink:rank2-rank5", "slow link", ["n3", "n6"]),
}
HEALTHY_SHARE = 0.10


@dataclass(frozen=True)
class Run:
    check: float  # the allreduce check's seconds (median over the nodes)
    setup: float  # creating the groups, before the run's first collective
    rounds_s: float  # the rounds
    rounds: int
    budget_rounds: int
    budget_s: float
    outcome: str
    nodes: list[str]

    @property
    def added(self) -> float:
        return self.setup + self.rounds_s

    @property
    def within(self) -> bool:
        return self.rounds <= self.budget_rounds and self.added <= self.budget_s


def measure(fault: str) -> Run:
    with tempfile.TemporaryDirectory(prefix="gpuenv-bench-localise-") as work:
        nodes = run_nodes(Path(work), NODES, "--level", "deep", env={"GPUENV_TEST_FAULT": fault} if fault else {})
    if not all(n.report for n in nodes):
        raise SystemExit("a node wrote no report: " + " | ".join(n.stderr[-800:] for n in nodes))
    loc = nodes[0].localisation
    return Run(
        statistics.median(n.allreduce["duration_s"] for n in nodes),
        loc["setup_s"],
        loc["seconds"],
        len(loc["rounds"]) - 1,
        loc["budget"]["rounds"],
        loc["budget"]["seconds"],
        loc["outcome"],
        loc["nodes"],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1)
    runs = parser.parse_args().runs
    compile_package()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {NODES} single-rank nodes, deep")
    ok = True
    for name, (fault, outcome, named) in SCENARIOS.items():
        for _ in range(runs):
            run = measure(fault)
            good = run.outcome == outcome and run.nodes == named and run.within
            good &= name != "healthy" or run.added <= HEALTHY_SHARE * run.check
            ok &= good
            print(
                f"{name:<22} check {run.check:6.1f} s  localisation +{run.added:5.2f} s (groups {run.setup:.2f} s, "
                f"{run.rounds} round(s) {run.rounds_s:.2f} s) = {run.added / run.check:.1%} of the check; "
                f"budget {run.budget_rounds} rounds, {run.budget_s:g} s; {run.outcome} {'-'.join(run.nodes)}"
                + ("" if good else "  MISSED")
            )
    print(f"targets: the right node or link, within the budget, healthy <= {HEALTHY_SHARE:.0%} of the check")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
