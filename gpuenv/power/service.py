"""`gpuenv tune power`, the service: step each GPU's power limit, measure, choose, put back.

The rule every path keeps: before the first limit changes, the original limits are in the state
file; whatever ends the run — success, a failed or crashed or hung workload, SIGINT, SIGTERM — the
original limits are set again and read back before gpuenv exits, and only then is the state file
removed. After a SIGKILL or a power loss the state file stays, `restore` puts the limits back from
it, and `tune` refuses to start while it exists. The workload runs in a child process group
(gpuenv/power/workload.py), so its crash or hang cannot take the limits' keeper with it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from gpuenv import processes
from gpuenv.errors import BadRequest, BadResult, CannotRun, Interrupted
from gpuenv.power import devices, record, state
from gpuenv.power.core import (
    RESULT_SCHEMA,
    GpuLimits,
    GpuTuning,
    PowerState,
    SavedLimit,
    cap_result,
    caps,
    choose,
)
from gpuenv.power.devices import PowerControl
from gpuenv.power.workload import PARENT_ENV
from gpuenv.types import DeviceChoice, Level
from gpuenv.verify import faults
from gpuenv.verify.facts import visible

HELLO_TIMEOUT = 300.0  # the workload process imports torch (and initialises CUDA) first
HELD_TOLERANCE_MW = 1000


@dataclass(frozen=True)
class TuneRequest:
    device: DeviceChoice = "auto"
    level: Level = "standard"
    steps: int = 5  # caps tried per GPU, evenly across its range (the original limit besides)
    max_loss: float = 0.05  # throughput the chosen cap may give up against the fastest
    apply: bool = False
    gpus: tuple[int, ...] = ()  # NVML (or AMD SMI) indices; none: every GPU
    timeout: float = 300.0  # seconds for the NLP step at one cap
    state_file: Path | None = None  # default: state.location()


@dataclass(frozen=True)
class TuneOutcome:
    device: str
    level: str
    max_loss: float
    applied: bool
    state_file: str
    gpus: list[GpuTuning] = field(default_factory=list)
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": RESULT_SCHEMA,
            "device": self.device,
            "workload": {"name": "nlp", "level": self.level},
            "max_loss": self.max_loss,
            "applied": self.applied,
            "state_file": self.state_file,
            "note": self.note,
            "gpus": [g.to_dict() for g in self.gpus],
        }


class Workload(Protocol):
    """What runs the NLP step: the child process below, or a test's stand-in."""

    def start(self, device: DeviceChoice) -> dict[str, Any]: ...

    def measure(self, request: dict[str, Any], timeout: float) -> dict[str, Any]: ...

    def close(self) -> None: ...


class WorkloadFailed(Exception):
    pass


class WorkloadProcess:
    """gpuenv.power.workload in its own process group, asked one line at a time, each with a deadline."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.buffer = b""
        # torch's chatter goes here, not to the terminal; its tail explains a crash (closed in close())
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115

    def start(self, device: DeviceChoice) -> dict[str, Any]:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuenv.power.workload"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            start_new_session=True,
            env={**os.environ, PARENT_ENV: str(os.getpid())},
        )
        return self._ask({"op": "hello", "device": device}, HELLO_TIMEOUT)

    def measure(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        return self._ask({"op": "measure", **request}, timeout)

    def _ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        with suppress(BrokenPipeError):
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkloadFailed(f"did not finish within {timeout:g} s (killed)")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16) if ready else None
            if chunk == b"":
                raise WorkloadFailed(f"crashed ({self._death()})")
            self.buffer += chunk or b""
        line, self.buffer = self.buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise WorkloadFailed(f"failed: {answer['error']}")
        return answer

    def _death(self) -> str:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "closed its output"
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
        self.stderr.seek(0, os.SEEK_END)
        self.stderr.seek(max(0, self.stderr.tell() - 2000))
        lines = self.stderr.read().decode(errors="replace").strip().splitlines()
        return f"{how}; its last words: {lines[-1][:300]}" if lines else how

    def close(self) -> None:
        """SIGKILL the whole group: a hung step holds nothing gpuenv needs back."""
        if self.proc is None:
            return
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self.stderr.close()


# --- the GPUs' limits (NVML or AMD SMI: gpuenv/power/devices.py) -----------------------------------


def _control() -> PowerControl:
    return devices.open_control()


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else milliwatts / 1000


def _limits(adapter: PowerControl, wanted: tuple[int, ...]) -> list[GpuLimits]:
    """The GPUs to tune, with their range and the limit in force; GPUs that cannot say are refused."""
    found = adapter.power_limits()
    unknown = sorted(set(wanted) - {g["index"] for g in found})
    if unknown:
        raise BadRequest(
            f"no GPU with {adapter.library} index {unknown[0]}", hint=f"this node has GPUs 0 to {len(found) - 1}"
        )
    gpus = []
    for g in found:
        if wanted and g["index"] not in wanted:
            continue
        if None in (g["min_mw"], g["max_mw"], g["limit_mw"]):
            reasons = ", ".join(f"{k}: {v}" for k, v in g["unknown"].items())
            raise CannotRun(f"GPU {g['index']} does not give its power limits ({reasons})", hint="--gpu the others")
        watts = [_watts(g[k]) for k in ("min_mw", "max_mw", "default_mw", "limit_mw")]
        gpus.append(GpuLimits(g["index"], g["uuid"], g["name"], *watts))  # type: ignore[arg-type]
    if not gpus:
        raise CannotRun(f"{adapter.library} shows no GPU", hint=f"is the driver loaded? ({adapter.show_hint})")
    return gpus


def _set(adapter: PowerControl, index: int, watts: float) -> None:
    """Set and read back; the driver must hold what was asked (to a watt: some round it)."""
    milliwatts = round(watts * 1000)
    try:
        adapter.set_power_limit_mw(index, milliwatts)
        held = adapter.power_limit_mw(index)
    except adapter.failed as exc:
        if getattr(exc, "reason", None) == "NO_PERMISSION":
            raise BadRequest(f"{exc}: changing a power limit needs root", hint="sudo gpuenv tune power") from exc
        if getattr(exc, "reason", None) in ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND"):
            why = f"{exc}: this GPU or driver does not let {adapter.library} set it"
            raise CannotRun(why, hint="--gpu the others") from exc
        raise BadResult(str(exc), hint=f"{adapter.show_hint} shows what the GPU allows") from exc
    if abs(held - milliwatts) > HELD_TOLERANCE_MW:
        raise BadResult(f"GPU {index} holds {held / 1000:g} W after being set to {watts:g} W", hint=adapter.show_hint)


# --- putting the limits back --------------------------------------------------------------------


def put_back(adapter: PowerControl, saved: tuple[SavedLimit, ...]) -> list[str]:
    """Every saved GPU at its original limit (set only where it differs, then read back); what failed."""
    try:
        by_uuid = {g["uuid"]: g["index"] for g in adapter.power_limits() if g.get("uuid")}
    except Exception:  # cannot list the GPUs now: the saved indices are the best guess left
        by_uuid = {}
    problems = []
    for gpu in saved:
        index = by_uuid.get(gpu.uuid, gpu.index) if gpu.uuid else gpu.index
        try:
            if adapter.power_limit_mw(index) != gpu.original_mw:
                _set(adapter, index, gpu.original_mw / 1000)
        except Exception as exc:  # every GPU gets its turn, whatever one of them says
            problems.append(f"GPU {index}: {getattr(exc, 'message', exc)}")
    return problems


@contextmanager
def _limits_kept(
    adapter: PowerControl, path: Path, saved: tuple[SavedLimit, ...], workload: Workload
) -> Iterator[list[bool]]:
    """Run the body; then, however it ends, stop the workload, put every original limit back and
    remove the state file — unless the body kept a cap (--apply: it says so through the flag)."""
    kept = [False]
    try:
        yield kept
    finally:
        with processes.Deferred():  # a second Ctrl-C cannot cut the restore short
            workload.close()
            problems = [] if kept[0] else put_back(adapter, saved)
            if problems:
                raise BadResult(
                    f"could not put back the original power limit: {'; '.join(problems)}",
                    hint=f"the originals stay in {path}: gpuenv tune power --restore (or {adapter.set_hint})",
                )
            if not kept[0]:
                state.remove(path)


# --- tune -----------------------------------------------------------------------------------------


def state_path(request_path: Path | None) -> Path:
    return request_path or state.location(os.environ, os.geteuid())


def refuse_if_changed(path: Path) -> None:
    found = state.read(path)
    if found is None:
        return
    if found.phase == "tuning" and state.running(found.pid):
        raise BadRequest(f"{found.describe()} and is still running", hint="let it finish, or stop it (it restores)")
    raise BadRequest(
        f"{path} says {found.describe()}: a limit may still be changed",
        hint="gpuenv tune power --restore puts the originals back",
    )


def tune(request: TuneRequest, *, workload: Workload | None = None) -> TuneOutcome:
    faults.check_setting()
    if request.apply and request.device == "cpu":
        raise BadRequest("--apply with --device cpu", hint="a cap is chosen from a GPU's own figures only")
    path = state_path(request.state_file)
    refuse_if_changed(path)
    adapter = _control()
    gpus = _limits(adapter, request.gpus)
    runner = workload or WorkloadProcess()
    saved = tuple(SavedLimit(g.index, g.uuid, round(g.original_w * 1000)) for g in gpus)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    try:
        with _limits_kept(adapter, path, saved, runner) as kept:
            device = _start(runner, request, gpus, adapter)
            state.write(path, PowerState("tuning", os.getpid(), started, saved))
            tunings = [_sweep(adapter, runner, request, gpu, device) for gpu in gpus]
            if request.apply:
                kept[0] = _apply(adapter, path, tunings, started)
    except KeyboardInterrupt as exc:
        raise Interrupted(f"interrupted by {exc or 'SIGINT'}; every GPU's original power limit is back") from None
    for tuning in tunings:
        with suppress(adapter.failed):  # unknown stays None: the restore itself was read back
            tuning.final_w = adapter.power_limit_mw(tuning.gpu.index) / 1000
    note = _cpu_note() if device == "cpu" else None
    return TuneOutcome(device, request.level, request.max_loss, kept[0], str(path), tunings, note)


def _cpu_note() -> str:
    return (
        "the NLP step ran on the CPU (--device cpu): its tokens/s are the CPU's and the watts the GPUs' own "
        "draw meanwhile; no cap is chosen from them. This exercises the stepping and restoring only."
    )


def _start(workload: Workload, request: TuneRequest, gpus: list[GpuLimits], adapter: PowerControl) -> str:
    try:
        hello = workload.start(request.device)
    except WorkloadFailed as exc:
        raise CannotRun(f"the NLP workload could not start: {exc}", hint="is torch installed? gpuenv[verify]") from exc
    device = hello.get("device")
    if device is None:
        raise CannotRun(
            f"{hello.get('why', 'no CUDA device')}: tune power measures each GPU",
            hint="install a CUDA (on AMD, ROCm) build of torch; --device cpu only exercises the mechanism",
        )
    if device == "cuda" and hello.get("cuda_devices", 0) < len(gpus):
        masks = adapter.node.devices_variables
        raise CannotRun(
            f"torch sees {hello.get('cuda_devices')} GPU(s), {adapter.library} {len(gpus)}",
            hint=f"unset {masks}, or --gpu the GPUs torch sees",
        )
    return str(device)


def _cuda_index(adapter: PowerControl, gpu: GpuLimits) -> int:
    """The GPU's torch index: NVML's under CUDA_VISIBLE_DEVICES; AMD SMI's under ROCR_VISIBLE_DEVICES
    and HIP_VISIBLE_DEVICES (positions among every GPU, so all of them are listed)."""
    by_position = adapter.node.visible_by_position
    among = [{"index": g["index"], "uuid": g["uuid"]} for g in adapter.power_limits()] if by_position else []
    listed = visible(among or [{"index": gpu.index, "uuid": gpu.uuid}], adapter.node.visible(among, os.environ))
    mine = [g for g in listed if g["index"] == gpu.index]
    return int(mine[0]["cuda_index"]) if mine else gpu.index


def _sweep(adapter: PowerControl, workload: Workload, request: TuneRequest, gpu: GpuLimits, device: str) -> GpuTuning:
    """Every cap on one GPU, then its original limit back before the next GPU starts."""
    tuning = GpuTuning(gpu)
    ask = {"device": device, "level": request.level, "nvml_index": gpu.index, "cuda_index": _cuda_index(adapter, gpu)}
    ask["smi"] = adapter.smi  # whose energy reading the workload takes
    for cap in caps(gpu, request.steps):
        _set(adapter, gpu.index, cap)
        try:
            answer = workload.measure({**ask, "steps": _steps(request.level, device)}, request.timeout)
        except WorkloadFailed as exc:
            raise BadResult(
                f"the NLP step on GPU {gpu.index} at {cap:g} W {exc}; every original power limit is put back",
                hint="rerun; if it repeats, run gpuenv verify on this node",
            ) from exc
        tuning.results.append(cap_result(cap, answer, on_gpu=device == "cuda"))
    _set(adapter, gpu.index, gpu.original_w)
    tuning.choice = choose(tuning.results, max_loss=request.max_loss, original_w=gpu.original_w)
    return tuning


# Timed optimizer steps of the NLP step at each cap: on a GPU long enough for the clocks to settle
# under the new limit (BERT-base, about 2k tokens a step); on the CPU a few (the mechanism only).
GPU_STEPS = {"quick": 50, "standard": 200, "deep": 500}
CPU_STEPS = 3


def _steps(level: Level, device: str) -> int:
    return GPU_STEPS[level] if device == "cuda" else CPU_STEPS


def _apply(adapter: PowerControl, path: Path, tunings: list[GpuTuning], started: str) -> bool:
    """Keep each chosen cap: recorded in the state file first, so --restore can undo it."""
    chosen = [(t.gpu, t.choice.limit_w) for t in tunings if t.choice is not None and t.choice.limit_w is not None]
    if not chosen:
        return False
    saved = tuple(SavedLimit(g.index, g.uuid, round(g.original_w * 1000), round(w * 1000)) for g, w in chosen)
    state.write(path, PowerState("applied", os.getpid(), started, saved))
    for gpu, watts in chosen:
        _set(adapter, gpu.index, watts)
    record.write(record_path(path), [record.AppliedCap(s.index, s.uuid, s.applied_mw or 0) for s in saved])
    return True


def record_path(state_file: Path) -> Path:
    """Where verify learns which caps tune power applied: GPUENV_POWER_RECORD, else beside the
    state file (root's: /var/lib/gpuenv/power-applied.json, where verify looks by default)."""
    return record.location() if os.environ.get(record.ENV) else state_file.parent / record.DEFAULT.name


# --- restore --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RestoreOutcome:
    state_file: str
    restored: tuple[SavedLimit, ...]  # empty: there was nothing to put back

    def to_dict(self) -> dict[str, Any]:
        return {
            "state_file": self.state_file,
            "restored": [{"index": g.index, "uuid": g.uuid, "original_w": g.original_mw / 1000} for g in self.restored],
        }


def restore(state_file: Path | None = None) -> RestoreOutcome:
    """Put back the limits a state file holds (after a SIGKILL, a power loss, or to undo --apply)."""
    path = state_path(state_file)
    found = state.read(path)
    if found is None:
        return RestoreOutcome(str(path), ())
    if found.phase == "tuning" and state.running(found.pid):
        raise BadRequest(f"{found.describe()} and is still running", hint="stop it instead: it restores on SIGTERM")
    adapter = _control()
    with processes.Deferred():
        problems = put_back(adapter, found.gpus)
    if problems:
        raise BadResult(
            f"could not put back: {'; '.join(problems)}", hint=f"{path} is kept; {adapter.set_hint} by hand"
        )
    state.remove(path)
    record.remove(record_path(path))
    return RestoreOutcome(str(path), found.gpus)
