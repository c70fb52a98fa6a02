"""One verify run: decides the device, drives the worker check by check under each check's limit,
collects the results and the XIDs the NVML probe saw meanwhile.

When a check runs past its limit the whole worker group is killed and the check is `timeout`; when
the worker dies or a rank crashes the check is a `crash` with the signal and the tail of stderr. A
fresh worker then runs the remaining checks. SIGTERM and SIGINT stop the run (`Interrupted`).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from gpuenv.errors import BadRequest, Interrupted
from gpuenv.platforms import nodes
from gpuenv.platforms.node import GpuNode
from gpuenv.processes import interrupted_by, signals_interrupt
from gpuenv.verify import registry
from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.catalogue import finding
from gpuenv.verify.checks.nvml.events import watch_findings, xid_findings
from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.facts import HostFacts, bus_fields, gpu_node_note, host_facts, loads
from gpuenv.verify.model import HEALTH, CheckResult, died, status_from_findings
from gpuenv.verify.options import OnStart, VerifyOptions
from gpuenv.verify.pci import buses_on_pci, driver_gpus, pci_scope
from gpuenv.verify.preconditions import missing_gpu, skipped, torch_unusable
from gpuenv.verify.site.judging import judged
from gpuenv.verify.site.running import environment, run_program
from gpuenv.verify.site.spec import SiteSpec
from gpuenv.verify.worker_handle import Worker, WorkerDied, WorkerTimeout

START_TIMEOUT = 20.0  # a fresh worker answers its first request (Python's start, gpuenv's imports)
WARM_TIMEOUT = 300.0  # a fresh worker imports torch (and its forkserver too) before the first check
STDERR_TAIL = 3000
XID_TIMEOUT = 10.0


def probe_timed_out(library: str, limit: float) -> str:
    return (
        f"{library} gave no answer within {limit:g} s (probe_timeout_s in the NVML policy): its start is that "
        "slow when persistence mode is off (nvidia-smi -pm 1, or run nvidia-persistenced), or the driver hangs"
    )


class Run:
    """One verify run: decides the device, drives the worker, collects results."""

    def __init__(
        self,
        opts: VerifyOptions,
        on_result: Callable[[CheckResult], None] | None,
        on_start: OnStart | None = None,
    ) -> None:
        self.opts = opts
        self.on_result = on_result or (lambda _r: None)
        self.on_start = on_start or (lambda _name, _limit: None)
        self.results: list[CheckResult] = []
        self.host = HostFacts()
        self.provided: dict[str, Any] = {}
        self.worker: Worker | None = None
        self.watcher: Worker | None = None  # the NVML probe, holding the XID event set
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in execute)
        self.device = "cpu"
        self.cpu_only = True
        self.device_note = ""
        self.timings: dict[str, float] = {}
        self.xid_unwatched: list[dict[str, Any]] = []  # the XID watch's calls that failed (adapter.register_xids)
        self.probe_timeout: str | None = None  # the NVML probe gave no answer in time: why, for the nvml check
        self.no_gpu: str | None = None  # a run on the GPUs that has none: why (every check is skipped)
        self.no_torch: str | None = None  # a check found torch cannot run here: the torch checks after it skip

    def start_worker(self, *, forkserver: bool) -> Worker:
        started = time.monotonic()
        worker = self.worker = Worker(self.stderr, env=self.gpu_env())
        context = {
            "level": self.opts.level,
            "device": self.device,
            "expect_gpus": self.opts.expect_gpus,
            "artifacts_dir": self.opts.artifacts_dir,
            "baseline": self.opts.baseline,
            "policy": self.opts.policy,
            "kb": self.opts.kb,
            "host": self.host.to_dict(),
            "placement": self.opts.placement,
        }
        worker.ask({"op": "init", "context": context, "forkserver": forkserver}, START_TIMEOUT)
        if forkserver:  # importing torch is not the check's time: it has its own limit
            worker.ask({"op": "warm"}, WARM_TIMEOUT)
        self.add_time("worker_start", time.monotonic() - started)
        return worker

    def cuda_visible(self) -> str | None:
        """The GPUs the checks may use, as CUDA_VISIBLE_DEVICES says them: --gpus, else the environment's."""
        if self.opts.gpus:
            return ",".join(str(i) for i in self.opts.gpus)
        return os.environ.get("CUDA_VISIBLE_DEVICES")

    def gpu_env(self) -> dict[str, str]:
        """What the worker's environment adds for --gpus: NVML's indices, in PCI bus order as NVML's are."""
        if not self.opts.gpus:
            return {}
        return {"CUDA_VISIBLE_DEVICES": str(self.cuda_visible()), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def check_gpus_exist(self, probe: dict[str, Any], on_bus: list[str]) -> None:
        """--gpus names GPUs this node has (NVML's count, else the PCI bus's): a bad request otherwise."""
        count = len(probe.get("gpus", [])) if loads(probe) else len(on_bus)
        missing = [i for i in self.opts.gpus if i >= count]
        if missing:
            node = nodes.for_smi(probe.get("smi", ""))
            has = f"GPUs 0-{count - 1}" if count > 1 else "GPU 0" if count == 1 else f"no {node.vendor} GPU"
            raise BadRequest(
                f"--gpus {','.join(map(str, missing))}: no such GPU on this node (it has {has})", hint=node.list_hint
            )

    def limit(self, spec: registry.Spec) -> float:
        return self.opts.timeout or spec.timeout(self.opts.level)

    def add_time(self, phase: str, seconds: float) -> None:
        self.timings[phase] = round(self.timings.get(phase, 0.0) + seconds, 3)

    def decide_device(self) -> None:
        started = time.monotonic()
        buses, scope = buses_on_pci(), pci_scope()
        probe: dict[str, Any] = {"nvml": "not probed (--device cpu)"}
        if self.opts.device != "cpu":
            probe = nodes.probed(self.probe, loads, buses)[1]
        self.check_gpus_exist(probe, [bus for found in buses.values() for bus in found])
        environ = {**os.environ, **self.gpu_env()}  # --gpus: the GPUs the checks may use
        self.host = host_facts(probe, **bus_fields(buses), driver_gpus=driver_gpus(), scope=scope, environ=environ)
        self.add_time("probe", time.monotonic() - started)
        if self.opts.device in ("cpu", "cuda"):
            self.device = self.opts.device
            self.cpu_only = self.device == "cpu"
            self.device_note = f"--device {self.device}"
            return
        node = gpu_node_note(self.host)
        if node:
            self.device, self.cpu_only = "cuda", False
            self.device_note = f"{node}: a GPU node, workloads run on {nodes.for_smi(self.host.smi).runtime}"
        else:
            self.device_note = f"no NVIDIA GPU on the PCI bus, NVML: {probe['nvml']}: CPU only"

    def probe_limit(self) -> float:
        """How long the probe may take to answer: the policy's probe_timeout_s (nvmlInit takes seconds
        per GPU with persistence mode off)."""
        policy = load_policy(Path(self.opts.policy) if self.opts.policy else None)
        return float(policy["probe_timeout_s"])

    def probe(self, node: GpuNode) -> dict[str, Any]:
        """The node's management library's GPUs and driver, from a helper process (a hung init must not
        hang verify) that then keeps watching for XIDs where the library has them."""
        worker = Worker(self.stderr)
        limit = self.probe_limit()
        try:
            answer = worker.ask({"op": node.probe_op}, limit)
        except WorkerTimeout:
            worker.kill()
            timed_out = probe_timed_out(node.library, limit)
            self.probe_timeout = timed_out if node.watches_xids else self.probe_timeout  # its XIDs unwatched
            return {"smi": node.smi, "nvml": timed_out}
        except WorkerDied:
            worker.kill()
            return {"smi": node.smi, "nvml": f"the {node.library} probe process crashed"}
        if loads(answer) and node.watches_xids:
            self.watcher = worker
            self.xid_unwatched = list(answer.get("xid_unwatched", []))
        else:
            worker.kill()
        return answer

    def note_unwatched(self, result: CheckResult) -> None:
        if result.name != HEALTH:
            return
        policy = load_policy(Path(self.opts.policy) if self.opts.policy else None)
        result.findings += watch_findings(self.xid_unwatched, self.host.gpus, policy)
        if self.probe_timeout:  # and no XID was watched during the run
            result.findings.append(finding("nvml.probe-timeout", self.probe_timeout + "; XIDs not watched"))
        if result.status in ("pass", "warn", "fail"):
            result.status = status_from_findings(result.findings)

    def drain_xids(self, result: CheckResult) -> None:
        """XIDs since the last look, named with their action: on the check that just crashed or
        timed out (they explain it), else on the nvml check when it ran, else on this check."""
        if self.watcher is None:
            return
        try:
            answer = self.watcher.ask({"op": "xids"}, XID_TIMEOUT)
        except (WorkerTimeout, WorkerDied):
            self.watcher.kill()
            self.watcher = None
            return
        events, failed = [tuple(e) for e in answer["xids"]], answer.get("failed")
        if not events and not failed:
            return
        policy = load_policy(Path(self.opts.policy) if self.opts.policy else None)
        found = xid_findings(events, self.host.gpus, policy, during=f"the run (while {result.name} ran)")
        found += watch_findings([{"gpu": None, **failed}] if failed else [], self.host.gpus, policy)
        health = next((r for r in self.results if r.name == HEALTH), None)
        target = result if result.status in ("crash", "timeout") or health is None else health
        if target.status in ("pass", "warn", "fail", "skip"):
            before = target.status
            target.findings.extend(found)
            target.status = status_from_findings(target.findings)
            if target.status != before:
                target.summary = found[0].message
        else:
            target.findings.extend(found)

    def run_check(self, spec: registry.Spec, torch_follows: bool) -> CheckResult:
        limit = self.limit(spec)
        if isinstance(spec, SiteSpec) and (spec.kind == "program" or (spec.needs_gpu and self.cpu_only)):
            return self.run_site_program(spec, limit)
        # a Python site check runs in the worker as gpuenv's own do: its entry point goes with the request
        site = {"entry": spec.target, "origin": spec.origin} if isinstance(spec, SiteSpec) else {}
        mark = self.stderr.seek(0, os.SEEK_END)
        started = time.monotonic()
        running = False
        try:
            worker = self.worker or self.start_worker(forkserver=torch_follows)
            started, running = time.monotonic(), True
            answer = worker.ask({"op": "run", "check": spec.name, "limit_s": limit, **site}, limit)
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
            return died(spec.name, code, time.monotonic() - started, self.stderr_tail(mark))
        result = CheckResult.from_dict(answer["result"])
        self.provided.update({k: v for k, v in answer.get("provided", {}).items() if k in spec.provides})
        if result.status == "crash":
            result.detail["stderr_tail"] = self.stderr_tail(mark)
            self.replace_worker()  # ranks may linger after a crash: start clean
        return result

    def run_site_program(self, spec: SiteSpec, limit: float) -> CheckResult:
        """A site check that needs GPUs on a CPU-only run (skipped, saying so), or a program (in a
        helper process of its own, under the same watchdog)."""
        if spec.needs_gpu and self.cpu_only:
            summary = f"needs GPUs; this run is CPU only ({self.device_note})"
            return CheckResult(spec.name, "skip", summary=summary, detail={"origin": spec.origin})
        inherited = {**os.environ, **self.gpu_env()}
        level, device, gpus = self.opts.level, self.device, self.host.gpus
        return run_program(
            spec,
            limit=limit,
            stderr=self.stderr,
            tail=self.stderr_tail,
            environ=lambda work: environment(
                spec, level=level, device=device, gpus=gpus, limit=limit, work_dir=work, inherited=inherited
            ),
            gpus=gpus,
        )

    def replace_worker(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None

    def stderr_tail(self, mark: int) -> str:
        self.stderr.seek(mark)
        data = self.stderr.read()
        self.stderr.seek(0, os.SEEK_END)
        return data[-STDERR_TAIL:].decode(errors="replace")

    def unmet(self, spec: registry.Spec) -> str | None:
        """The precondition this check would fail from, already found missing (gpuenv.verify.preconditions)."""
        if self.no_gpu:
            return "no GPU on this node (--device cuda)"
        return self.no_torch if spec.needs_torch else None

    def execute(self, specs: list[registry.Spec]) -> str | None:
        """Run the checks; returns the name of the signal that interrupted the run, if any."""
        try:
            # Across nodes a launcher (torchrun) stops every rank once one exits: the check that
            # names the hung peer ends first, within its limit, so the report says who it was.
            deferred: list[int] | None = [] if self.opts.placement else None
            with signals_interrupt(deferred):
                self.decide_device()
                self.no_gpu = missing_gpu(self.device, self.host)
                for i, spec in enumerate(specs):
                    if deferred:
                        raise interrupted_by(deferred[0])
                    unmet = self.unmet(spec)
                    if unmet:
                        self.results.append(skipped(spec.name, unmet))
                        self.on_result(self.results[-1])
                        continue
                    torch_follows = any(s.needs_torch for s in specs[i:])
                    self.on_start(spec.name, self.limit(spec))
                    result = self.run_check(spec, torch_follows)
                    if isinstance(spec, SiteSpec) and result.figures and self.opts.baseline and not self.cpu_only:
                        judged(result, load_baselines(Path(self.opts.baseline)), self.host)
                    self.no_torch = self.no_torch or torch_unusable(result)
                    self.results.append(result)
                    self.note_unwatched(result)
                    self.drain_xids(result)
                    self.add_time(f"check:{spec.name}", result.duration_s)
                    self.on_result(result)
                if deferred:
                    raise interrupted_by(deferred[0])
        except Interrupted as exc:
            self.replace_worker()
            return exc.signame
        finally:
            if self.worker is not None:
                self.worker.stop()
            if self.watcher is not None:
                self.watcher.stop()
            self.stderr.close()
        return None
