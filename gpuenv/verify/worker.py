"""The verify worker: one long-lived process, its own process group, that runs checks one by one.

It imports torch once (the first torch check pays for it) and forks distributed ranks from a
forkserver, so isolation costs no torch import per check. The engine sends one JSON request per
line on stdin and reads one JSON answer per line on the file descriptor named by
GPUENV_VERIFY_FD; stdout is pointed at stderr so nothing a library prints can garble the answers.
The engine's watchdog kills this process group on a timeout; this process never decides that.
The same program, started apart, is the engine's NVML probe: it names the GPUs and then holds
the XID event set for the whole run (it never touches CUDA, so it outlives any check's crash).
Every worker dies with the engine (a thread waits on the engine's pidfd: processes.die_with_parent).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from importlib import import_module
from typing import Any

from gpuenv.extras import EXTRAS, install_hint, missing
from gpuenv.platforms import nodes
from gpuenv.platforms.node import GpuNode
from gpuenv.processes import die_with_parent
from gpuenv.verify import faults
from gpuenv.verify.catalogue import finding
from gpuenv.verify.context import CheckContext
from gpuenv.verify.facts import HostFacts
from gpuenv.verify.model import CheckResult
from gpuenv.verify.preconditions import IMPORT_FAILED
from gpuenv.verify.probe import node_of_op, probe
from gpuenv.verify.ranks import RanksCrashed, start_forkserver
from gpuenv.verify.site.plugins import run_python
from gpuenv.verify.worker_handle import FD_ENV, PARENT_ENV
from gpuenv.verify.workloads.common import CudaUnusable, unusable_finding

# Exceptions whose text says the device or the communication layer broke: a crash, not our bug.
CRASH_MARKERS = (
    "CUDA error",
    "CUDA out of memory",
    "NCCL",
    "cuDNN error",
    "CUBLAS",
    "CUDNN",
    "device-side assert",
    "ECC",
    "Gloo",
    "Connection reset",
    "process ",
)


def run_check(name: str, ctx: CheckContext, site: dict[str, str] | None = None) -> CheckResult:
    """gpuenv's check `name`, or with `site` ({entry, origin}) a Python site check."""
    started = time.monotonic()
    result = _run(name, ctx, site)
    result.duration_s = time.monotonic() - started
    return result


def _run(name: str, ctx: CheckContext, site: dict[str, str] | None) -> CheckResult:
    faults.inject(name)
    try:
        if site:
            return run_python(name, site["entry"], site["origin"], ctx)
        module = import_module(f"gpuenv.verify.checks.{name}")
        result: CheckResult = module.run(ctx)
        return result
    except CudaUnusable as exc:
        return CheckResult(name, "fail", summary=str(exc), findings=[unusable_finding(str(exc))])
    except ImportError as exc:
        return _import_failed(name, ctx, exc)
    except Exception as exc:  # classified: the device broke (crash) or gpuenv did (error)
        return _classify(name, exc)


def _import_failed(name: str, ctx: CheckContext, exc: ImportError) -> CheckResult:
    """A library the check needs cannot be imported: one an extra installs names that extra."""
    module = (exc.name or "").split(".")[0]
    if isinstance(exc, ModuleNotFoundError) and exc.name in EXTRAS:
        absent = missing(exc.name, f"the {name} check")
        what = f"{absent.message}: {absent.hint}"
    else:
        what = f"cannot import {exc.name or 'a module'}: {exc}"
    detail = {IMPORT_FAILED: module} if module else {}
    if ctx.device == "cuda":
        return CheckResult(name, "fail", summary=what, findings=[finding("verify.import-failed", what)], detail=detail)
    return CheckResult(name, "error", summary=what, detail={"hint": install_hint("verify"), **detail})


def _classify(name: str, exc: BaseException) -> CheckResult:
    text = f"{type(exc).__name__}: {exc}"
    tail = "".join(traceback.format_exception(exc))[-4000:]

    if isinstance(exc, RanksCrashed):
        detail: dict[str, Any] = {"traceback": tail, "rank_exit_codes": exc.exit_codes, "rank": exc.rank}
        if exc.signal_name:
            detail["signal"] = exc.signal_name
        return CheckResult(name, "crash", summary=str(exc), detail=detail)
    crashed = type(exc).__name__ in ("ProcessExitedException", "ProcessRaisedException") or any(
        marker in str(exc) for marker in CRASH_MARKERS
    )
    if crashed:
        signal_name = _signal_of(exc)
        detail = {"traceback": tail}
        if signal_name:
            detail["signal"] = signal_name
        return CheckResult(name, "crash", summary=text.splitlines()[0][:300], detail=detail)
    return CheckResult(
        name, "error", summary=f"gpuenv could not run the check: {text}"[:300], detail={"traceback": tail}
    )


def _signal_of(exc: BaseException) -> str | None:
    number = getattr(exc, "signal_name", None) or getattr(exc, "exit_code", None)
    if isinstance(number, str):
        return number
    if isinstance(number, int) and number < 0:
        return signal.Signals(-number).name
    return None


def _warm_up() -> Any:
    """Start the rank forkserver (it imports torch for the ranks) and import torch here in a
    thread meanwhile; returns the thread, which must be joined before a check runs (two threads
    importing one package graph can see half-initialised modules)."""
    with contextlib.suppress(Exception):  # the check that needs ranks will report it
        start_forkserver()

    def imports() -> None:
        for name in ("torch", "torch.distributed", "gpuenv.verify.ranks"):
            with contextlib.suppress(Exception):
                import_module(name)

    thread = threading.Thread(target=imports, daemon=True)
    thread.start()
    return thread


def _forkserver_ready() -> None:
    """Fork one no-op process from the forkserver: returns once it has imported torch."""
    with contextlib.suppress(Exception):
        process = multiprocessing.get_context("forkserver").Process(target=int)
        process.start()
        process.join()


def probed_node(state: dict[str, Any]) -> GpuNode:
    return nodes.for_smi(state.get("smi", ""))


def drain_xids(state: dict[str, Any]) -> dict[str, Any]:
    events, failed = probed_node(state).management.drain_xids(state)
    return {"xids": events, "failed": failed}


def serve(answers: Any) -> None:
    ctx: CheckContext | None = None
    warming: Any = None
    state: dict[str, Any] = {}
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        node = node_of_op(op)
        if node is not None:  # the process that probes keeps the library and its XID watch for the run
            answer: dict[str, Any] = probe(node, state)
            state["smi"] = node.smi
        elif op == "xids":
            answer = drain_xids(state)
        elif op == "init":
            context = request["context"]
            ctx = CheckContext(**{**context, "host": HostFacts.from_dict(context["host"])})
            if request.get("forkserver"):
                warming = _warm_up()
            answer = {"ok": True}
        elif op == "warm":
            if warming is not None:
                warming.join()
                _forkserver_ready()
                warming = None
            answer = {"ok": True}
        elif op == "run" and ctx is not None:
            if warming is not None:
                warming.join()
            ctx.provided.clear()
            ctx.limit_s = request.get("limit_s")
            site = {k: request[k] for k in ("entry", "origin") if k in request}
            result = run_check(request["check"], ctx, site)
            answer = {"result": result.to_dict(), "provided": ctx.provided}
        else:
            answer = {"error": f"unknown request {op}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def main() -> None:
    die_with_parent(int(os.environ[PARENT_ENV]))
    answers = os.fdopen(int(os.environ[FD_ENV]), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(answers)


if __name__ == "__main__":
    main()
