"""Running a site check's program under the engine's watchdog: in a helper process of its own
process group (helper.py), from the descriptor its trust was checked on, with a clean environment
and the GPUENV_* variables below; at its limit the group is killed, and after it in any case, so
nothing it started is left running."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import IO

from gpuenv.errors import BadRequest
from gpuenv.verify.facts import GpuInfo
from gpuenv.verify.model import CheckResult
from gpuenv.verify.site import programs
from gpuenv.verify.site.answers import from_program
from gpuenv.verify.site.spec import API, SiteSpec
from gpuenv.verify.worker_handle import Worker, WorkerDied, WorkerTimeout

HELPER = "gpuenv.verify.site.helper"
START_TIMEOUT = 20.0  # the helper answers that the program started (Python's start, a few imports)
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The GPUs a job or --gpus gave the run, passed on as they are, so CUDA and ROCm tools see the same.
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def environment(
    spec: SiteSpec,
    *,
    level: str,
    device: str,
    gpus: tuple[GpuInfo, ...],
    limit: float,
    work_dir: str,
    inherited: Mapping[str, str],
) -> dict[str, str]:
    """A program's whole environment: nothing of gpuenv's but the GPU selection, and what it is told."""
    told = {
        "PATH": PATH,
        "LANG": "C.UTF-8",
        "HOME": work_dir,
        "TMPDIR": work_dir,
        "GPUENV_API": str(API),
        "GPUENV_CHECK": spec.name,
        "GPUENV_CHECK_FILE": spec.target,
        "GPUENV_LEVEL": level,
        "GPUENV_DEVICE": device,
        "GPUENV_GPUS": ",".join(str(g.index) for g in gpus),
        "GPUENV_GPU_UUIDS": ",".join(g.uuid or "" for g in gpus),
        "GPUENV_TIMEOUT": f"{limit:g}",
        "GPUENV_WORK_DIR": work_dir,
    }
    return {**{k: inherited[k] for k in GPU_VARIABLES if k in inherited}, **told}


def run_program(
    spec: SiteSpec,
    *,
    limit: float,
    stderr: IO[bytes],
    tail: Callable[[int], str],
    environ: Callable[[str], dict[str, str]],
    gpus: tuple[GpuInfo, ...],
) -> CheckResult:
    """The program's result; `environ(work_dir)` gives its environment, `tail(mark)` the run's
    stderr written since `mark`."""
    mark = stderr.seek(0, os.SEEK_END)
    started = time.monotonic()
    try:
        fd = programs.open_checked(spec)
    except BadRequest as exc:  # replaced or no longer trusted since it was read
        return CheckResult(spec.name, "error", summary=exc.message, detail={"origin": spec.origin})
    work = tempfile.mkdtemp(prefix="gpuenv-site-")
    helper: Worker | None = None
    running = False
    try:
        try:
            helper = Worker(stderr, program=HELPER, pass_fds=(fd,))
        finally:
            os.close(fd)  # the helper holds its own copy
        request = {"op": "exec", "fd": fd, "argv0": spec.target, "env": environ(work), "cwd": work}
        start = helper.ask(request, START_TIMEOUT)
        if "error" in start:
            return CheckResult(spec.name, "error", summary=start["error"], detail={"origin": spec.origin})
        started, running = time.monotonic(), True
        answer = helper.answer(limit)
    except WorkerTimeout:
        what = f"ran past its {limit:g} s limit" if running else f"could not be started within {START_TIMEOUT:g} s"
        pgid = helper.proc.pid if helper else None
        helper_kill(helper)
        detail = {"origin": spec.origin, "limit_s": limit, "killed_process_group": pgid, "stderr_tail": tail(mark)}
        summary = f"{spec.name} {what}; killed with every process it started"
        return CheckResult(spec.name, "timeout", time.monotonic() - started, summary=summary, detail=detail)
    except WorkerDied:
        helper_kill(helper)
        summary = f"the process running {spec.name} died (see the run's stderr)"
        detail = {"origin": spec.origin, "stderr_tail": tail(mark)}
        return CheckResult(spec.name, "error", summary=summary, detail=detail)
    finally:
        helper_kill(helper)  # whatever the program left behind goes with it
        shutil.rmtree(work, ignore_errors=True)
    result = from_program(
        spec.name,
        spec.origin,
        returncode=int(answer["returncode"]),
        stdout=str(answer["stdout"]),
        stderr_tail=tail(mark),
        gpus=gpus,
    )
    result.duration_s = time.monotonic() - started
    return result


def helper_kill(helper: Worker | None) -> None:
    if helper is not None and helper.proc.returncode is None:
        helper.kill()
