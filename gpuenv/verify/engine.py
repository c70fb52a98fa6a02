"""The verify engine: runs the selected checks in the worker under a hard-timeout watchdog.

One worker process (its own process group) runs the checks one at a time. When a check runs past
its limit the whole group (worker, forkserver, every rank) is killed with SIGKILL and the check is
recorded as `timeout`; when the worker dies or a rank crashes the check is a `crash` with the
signal and the tail of stderr. A fresh worker then runs the remaining checks. SIGTERM and SIGINT
stop the run and still give a (partial) report.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from gpuenv import __version__
from gpuenv.verify import registry
from gpuenv.verify.model import CheckResult, Finding, Report, decide, status_from_findings
from gpuenv.verify.worker import FD_ENV

PROBE_TIMEOUT = 20.0
WARM_TIMEOUT = 300.0  # a fresh worker imports torch (and its forkserver too) before the first check
STDERR_TAIL = 3000
SYSFS_PCI = Path("/sys/bus/pci/devices")


@dataclass(frozen=True)
class VerifyOptions:
    level: str = "quick"
    checks: tuple[str, ...] = ()
    device: str = "auto"
    expect_gpus: int | None = None
    strict: bool = False
    artifacts_dir: str | None = None
    baseline: str | None = None
    policy: str | None = None
    kb: str | None = None
    timeout: float | None = None  # overrides every check's own limit


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signame = signal.Signals(signum).name


class WorkerTimeout(Exception):
    pass


class WorkerDied(Exception):
    pass


class Worker:
    """The worker process and its line protocol, with a deadline on every answer."""

    def __init__(self, stderr: IO[bytes]) -> None:
        read_end, write_end = os.pipe()
        self.stderr = stderr
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuenv.verify.worker"],
            stdin=subprocess.PIPE,
            stdout=stderr,
            stderr=stderr,
            pass_fds=(write_end,),
            start_new_session=True,
            env={**os.environ, FD_ENV: str(write_end)},
        )
        os.close(write_end)
        self.answers = read_end
        self.buffer = b""

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError as exc:
            raise WorkerDied() from exc
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout()
            ready, _, _ = select.select([self.answers], [], [], left)
            if ready:
                chunk = os.read(self.answers, 1 << 16)
                if not chunk:
                    raise WorkerDied()
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer

    def kill(self) -> None:
        """SIGKILL the whole process group, then wait until no member is left (bounded)."""
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        deadline = time.monotonic() + 5
        while group_members(pgid) and time.monotonic() < deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            time.sleep(0.05)
        self.close()

    def stop(self) -> None:
        """Ask the worker to end (stdin closed); kill the group if it lingers."""
        with contextlib.suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.kill()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.answers)
        with contextlib.suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()


def group_members(pgid: int) -> list[int]:
    """PIDs of live (not zombie) processes in a process group, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def nvidia_on_pci(root: Path = SYSFS_PCI) -> list[str]:
    """Bus ids of NVIDIA GPUs (vendor 0x10de, class display/3D) on the PCI bus, from sysfs."""
    found: list[str] = []
    if not root.is_dir():
        return found
    for dev in sorted(root.iterdir()):
        try:
            vendor = (dev / "vendor").read_text().strip()
            klass = (dev / "class").read_text().strip()
        except OSError:
            continue
        if vendor == "0x10de" and klass.startswith("0x03"):
            found.append(dev.name)
    return found


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Turn SIGTERM/SIGINT into Interrupted for the duration of the run."""

    def handler(signum: int, _frame: Any) -> None:
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class Run:
    """One verify run: decides the device, drives the worker, collects results."""

    def __init__(self, opts: VerifyOptions, on_result: Callable[[CheckResult], None] | None) -> None:
        self.opts = opts
        self.on_result = on_result or (lambda _r: None)
        self.results: list[CheckResult] = []
        self.facts: dict[str, Any] = {}
        self.worker: Worker | None = None
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in execute)
        self.device = "cpu"
        self.cpu_only = True
        self.device_note = ""

    def start_worker(self, *, forkserver: bool) -> Worker:
        worker = self.worker = Worker(self.stderr)
        context = {
            "level": self.opts.level,
            "device": self.device,
            "expect_gpus": self.opts.expect_gpus,
            "artifacts_dir": self.opts.artifacts_dir,
            "baseline": self.opts.baseline,
            "policy": self.opts.policy,
            "kb": self.opts.kb,
            "facts": self.facts,
        }
        worker.ask({"op": "init", "context": context, "forkserver": forkserver}, PROBE_TIMEOUT)
        if forkserver:  # importing torch is not the check's time: it has its own limit
            worker.ask({"op": "warm"}, WARM_TIMEOUT)
        return worker

    def decide_device(self) -> None:
        on_bus = self.facts["pci_nvidia"] = nvidia_on_pci()
        if self.opts.device in ("cpu", "cuda"):
            self.device = self.opts.device
            self.cpu_only = self.device == "cpu"
            self.device_note = f"--device {self.device}"
            return
        probe = self.probe_nvml()
        if on_bus or probe == "ok":
            self.device, self.cpu_only = "cuda", False
            self.device_note = (
                f"{len(on_bus)} NVIDIA GPU(s) on the PCI bus" if on_bus else "NVML loads"
            ) + ": a GPU node, workloads run on CUDA"
        else:
            self.device_note = f"no NVIDIA GPU on the PCI bus, NVML: {probe}: CPU only"

    def probe_nvml(self) -> str:
        worker = Worker(self.stderr)
        try:
            status: str = worker.ask({"op": "probe"}, PROBE_TIMEOUT)["nvml"]
            return status
        except (WorkerTimeout, WorkerDied):
            return "NVML probe hung or crashed"
        finally:
            worker.kill()

    def run_check(self, spec: registry.CheckSpec, torch_follows: bool) -> CheckResult:
        limit = self.opts.timeout or spec.timeout(self.opts.level)
        mark = self.stderr.seek(0, os.SEEK_END)
        started = time.monotonic()
        running = False
        try:
            worker = self.worker or self.start_worker(forkserver=torch_follows)
            started, running = time.monotonic(), True
            answer = worker.ask({"op": "run", "check": spec.name}, limit)
        except WorkerTimeout:
            pgid = self.worker.proc.pid if self.worker else None
            self.replace_worker()
            what = (
                f"{spec.name} ran past its {limit:g} s limit"
                if running
                else f"the check process could not start (import torch) within {WARM_TIMEOUT:g} s"
            )
            return CheckResult(
                spec.name,
                "timeout",
                time.monotonic() - started,
                summary=f"{what}; killed with every process it started",
                detail={"limit_s": limit, "killed_process_group": pgid, "stderr_tail": self.stderr_tail(mark)},
            )
        except WorkerDied:
            code = self.worker.proc.wait() if self.worker else None
            self.replace_worker()
            sig = signal.Signals(-code).name if code is not None and code < 0 else None
            return CheckResult(
                spec.name,
                "crash",
                time.monotonic() - started,
                summary=f"{spec.name} crashed" + (f" ({sig})" if sig else f" (exit {code})"),
                detail={"signal": sig, "exit_code": code, "stderr_tail": self.stderr_tail(mark)},
            )
        result = CheckResult.from_dict(answer["result"])
        self.facts.update(answer.get("facts", {}))
        if result.status == "crash":
            result.detail["stderr_tail"] = self.stderr_tail(mark)
            self.replace_worker()  # ranks may linger after a crash: start clean
        return result

    def replace_worker(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None

    def stderr_tail(self, mark: int) -> str:
        self.stderr.seek(mark)
        data = self.stderr.read()
        self.stderr.seek(0, os.SEEK_END)
        return data[-STDERR_TAIL:].decode(errors="replace")

    def finish_xids(self) -> None:
        nvml_result = next((r for r in self.results if r.name == "nvml"), None)
        if nvml_result is None or self.worker is None or nvml_result.status in ("skip", "timeout", "crash"):
            return
        with contextlib.suppress(WorkerTimeout, WorkerDied):
            answer = self.worker.ask({"op": "finish"}, 10.0)
            extra = [Finding.from_dict(f) for f in answer.get("findings", [])]
            if extra:
                nvml_result.findings.extend(extra)
                nvml_result.status = status_from_findings(nvml_result.findings)
                nvml_result.summary = extra[0].message

    def execute(self, specs: list[registry.CheckSpec]) -> str | None:
        """Run the checks; returns the name of the signal that interrupted the run, if any."""
        try:
            with signals_interrupt():
                self.decide_device()
                for i, spec in enumerate(specs):
                    torch_follows = any(s.needs_torch for s in specs[i:])
                    result = self.run_check(spec, torch_follows)
                    self.results.append(result)
                    self.on_result(result)
                self.finish_xids()
        except Interrupted as exc:
            self.replace_worker()
            return exc.signame
        finally:
            if self.worker is not None:
                self.worker.stop()
            self.stderr.close()
        return None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_verify(opts: VerifyOptions, *, on_result: Callable[[CheckResult], None] | None = None) -> Report:
    """Run verify and build its report; never raises for a bad check, only for bad options."""
    specs = registry.select(opts.level, opts.checks)
    started = now()
    run = Run(opts, on_result)
    interrupted = run.execute(specs)
    done = {r.name for r in run.results}
    if interrupted:
        for spec in specs:
            if spec.name not in done:
                run.results.append(CheckResult(spec.name, "skip", summary=f"not run: interrupted by {interrupted}"))
    verdict = decide(run.results, strict=opts.strict, cpu_only=run.cpu_only, interrupted=interrupted)
    host = {
        "hostname": socket.gethostname(),
        "device_decision": run.device_note,
        "gpus": run.facts.get("gpus", []),
        "pci_nvidia": run.facts.get("pci_nvidia", []),
    }
    return Report(
        level=opts.level,
        device=run.device,
        cpu_only=run.cpu_only,
        started=started,
        finished=now(),
        gpuenv_version=__version__,
        host=host,
        stack=run.facts.get("stack", {}),
        checks=run.results,
        verdict=verdict,
        partial=interrupted is not None,
        interrupted=interrupted,
        options={
            "checks": [s.name for s in specs],
            "strict": opts.strict,
            "expect_gpus": opts.expect_gpus,
            "device": opts.device,
            "timeout_s": opts.timeout,
        },
    )
