"""The probe: a node's management library asked who its GPUs are, before any check runs. The engine asks
it in a helper process (the worker's probe ops: a hung init must not hang verify; NVML's holds the run's
XID watch), `verify --passive` in its own; either way through the platform's node half, never a vendor's
module by name."""

from __future__ import annotations

import time
from typing import Any

from gpuenv.platforms import nodes
from gpuenv.platforms.node import GpuNode


def probe(node: GpuNode, state: dict[str, Any] | None = None) -> dict[str, Any]:
    """The library's view of the host (GPUs, driver; "nvml" is "ok" or why not), how long its init took,
    and, given a `state` to keep it in, the start of the run-long XID watch: the process that holds the
    library initialised for the run lets the checks' own init find the driver set up (NVML with
    persistence mode off pays seconds on the first)."""
    management = node.management
    started = time.monotonic()
    problem = management.init()
    answer: dict[str, Any] = {"smi": node.smi, "init_s": round(time.monotonic() - started, 3)}
    if problem:
        return {**answer, "nvml": problem}
    uncounted = management.count_problem()
    gpus = management.identities()
    if uncounted or not gpus:
        return {**answer, "nvml": uncounted or "no GPU"}
    watch = {} if state is None else {"xid_unwatched": management.register_xids(state, len(gpus))}
    return {**answer, "nvml": "ok", "gpus": gpus, **management.driver_versions(), **watch}


def node_of_op(op: str) -> GpuNode | None:
    """The node half whose probe the worker's op asks for ("probe", "probe-amd"), or None."""
    return next((n for n in nodes.GPU_NODES if n.probe_op == op), None)
