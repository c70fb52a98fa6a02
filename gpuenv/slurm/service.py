"""The Slurm hooks as services: run verify under a hard budget, then drain or resume the node."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuenv import validate
from gpuenv.errors import BadRequest, CannotRun
from gpuenv.platforms import nodes
from gpuenv.slurm import core, kernel_xids, scontrol
from gpuenv.verify import pci, reportfile
from gpuenv.verify.checks.nvml.events import xid_findings
from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.facts import GpuInfo, visible
from gpuenv.verify.model import HEALTH, Finding
from gpuenv.verify.reportfile import VerifyReport

TERM_GRACE = 3.0  # seconds verify gets after SIGTERM to write its partial report
SLACK = 5.0  # seconds kept back from the budget for the kill, the drain and the exit
PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class HookRequest:
    hook: str  # "health-check" | "prolog" | "epilog"
    level: str
    max_time: float
    checks: tuple[str, ...] = ()
    expect_gpus: int | None = None
    reports_dir: Path | None = None
    drain_on_error: bool = True
    node: str | None = None


@dataclass(frozen=True)
class HookResult:
    exit_code: int  # 0 healthy, 1 drained (or the job's GPUs failed), 3 could not run
    node: str | None
    action: str  # "drained", "resumed", "kept", "none" (nothing to do), "left" (could not run, not drained)
    reason: str | None
    summary: str
    report: Path | None

    def line(self) -> str:
        """What the hook did, in words: `gpu01: nothing to do: certified`."""
        return f"{self.node}: {ACTIONS.get(self.action, self.action)}: {self.summary}"


ACTIONS = {
    "drained": "drained",
    "resumed": "resumed (gpuenv had drained it)",
    "kept": "left drained (by someone else, not gpuenv)",
    "none": "nothing to do",
    "left": "not drained (--no-drain-on-error)",
}


@dataclass(frozen=True)
class VerifyRun:
    code: int
    report: VerifyReport | None
    over_budget: bool
    stderr_tail: str


def find_node(explicit: str | None) -> str:
    """The node name as slurmd knows it: --node, SLURMD_NODENAME, else the host name slurmctld knows.

    A given name must be one Slurm node name (never a list, a range or ALL: the hook drains what it
    names) and is replaced by the NodeName `scontrol show node` confirms for it."""
    if explicit:
        return _confirmed(validate.slurm_node(explicit, "--node"), "--node")
    given = os.environ.get("SLURMD_NODENAME", "")
    if given:
        return _confirmed(validate.slurm_node(given, "SLURMD_NODENAME"), "SLURMD_NODENAME")
    for name in core.candidate_node_names({}, socket.gethostname()):
        if _is_node_name(name) and scontrol.node_state(name) is not None:
            return name
    raise CannotRun(f"slurmctld knows no node named {socket.gethostname()!r}", hint="give the node name with --node")


def _confirmed(name: str, source: str) -> str:
    known = scontrol.node_name(name)
    if known is None or not _is_node_name(known):
        raise BadRequest(
            f"slurmctld knows no node named {name!r} (from {source})",
            hint="give the node's NodeName as slurm.conf has it (scontrol show nodes lists them)",
        )
    return known


def _is_node_name(name: str) -> bool:
    try:
        validate.slurm_node(name)
    except BadRequest:
        return False
    return True


def run_hook(req: HookRequest) -> HookResult:
    """Run verify for a hook and act on the node: drain on a failure, resume only gpuenv's drains.
    Slurm is asked first (scontrol ping): without it no verdict could be acted on, so verify does not run."""
    if req.node is None and os.environ.get("SLURMD_NODENAME"):  # a name that is no node: before any Slurm call
        validate.slurm_node(os.environ["SLURMD_NODENAME"], "SLURMD_NODENAME")
    scontrol.ping()
    node = find_node(req.node)
    report_path = _report_path(req, node)
    run = run_verify(_verify_args(req, report_path), req.max_time, report_path, _verify_env(req))
    if run.over_budget:
        return _drain(node, core.reason("verify.budget", f"verify ran past {req.max_time:.0f} s"), 1, report_path)
    if run.code == 0 and req.hook == "epilog" and run.report is not None:
        found, note = job_kernel_xids(run.report, _verify_env(req))
        fatal = [f for f in found if f.severity == "fail"]
        if fatal:
            return _drain(node, _finding_reason(fatal[0]), 1, report_path)
        return _healthy(node, run, req, report_path, note)
    if run.code == 0:
        return _healthy(node, run, req, report_path)
    if run.code == 3 and run.report is not None and _nothing_to_check(run.report):
        return HookResult(0, node, "none", None, f"skip: {_skip_reasons(run.report)}", report_path)
    if run.code == 1 and run.report is not None:
        return _drain(node, core.failure_reason(run.report), 1, report_path)
    why = _could_not_run_why(run)
    if not req.drain_on_error:
        return HookResult(3, node, "left", None, f"could not run: {why}", report_path)
    return _drain(node, core.could_not_run_reason(why), 3, report_path)


def _healthy(node: str, run: VerifyRun, req: HookRequest, report: Path | None, note: str | None = None) -> HookResult:
    verdict = run.report.verdict if run.report is not None else None
    summary = verdict.summary if verdict is not None else "certified"
    summary += f"; {note}" if note else ""
    if req.hook != "health-check":  # prolog and epilog never resume: that is the health check's call
        return HookResult(0, node, "none", None, summary, report)
    state = scontrol.node_state(node)
    if state is not None and state.drained and core.is_ours(state.reason):
        scontrol.resume(node)
        return HookResult(0, node, "resumed", state.reason, summary, report)
    kept = state is not None and state.drained
    return HookResult(0, node, "kept" if kept else "none", state.reason if state else None, summary, report)


def job_kernel_xids(
    report: VerifyReport, env: dict[str, str], kmsg: Path = Path("/dev/kmsg")
) -> tuple[list[Finding], str | None]:
    """XIDs the kernel logged on the job's GPUs since the job started, judged like the nvml
    check's; the note says what was not read (or the warnings), else None."""
    health = next((c for c in report.checks if c.name == HEALTH), None)
    node = nodes.for_smi(health.metrics.get("smi", "") if health is not None else "")
    if not node.watches_xids:
        return [], f"kernel log not read: XIDs are NVIDIA's; {node.library}'s findings are the {HEALTH} check's"
    snap = _snapshot(health) if health is not None else None
    if not snap:
        return [], "kernel log not read: the report has no NVML snapshot to name the job's GPUs"
    gpus = visible(snap.get("gpus", []), env.get("CUDA_VISIBLE_DEVICES"))
    try:
        start = _job_start(env)
        lines = kernel_xids.read_kmsg(kmsg)
    except (CannotRun, OSError) as exc:
        return [], f"kernel log not read: {exc}"
    if start is None:
        return [], "kernel log not read: the job's start time is unknown"
    since_boot = start - (time.time() - time.monotonic())
    events = kernel_xids.job_events(kernel_xids.parse_kmsg(lines), since_boot, gpus)
    infos = tuple(GpuInfo(g["index"], uuid=g.get("uuid"), pci_bus_id=g.get("pci_bus_id")) for g in gpus)
    found = xid_findings(events, infos, load_policy(), during="the job (kernel log)")
    warned = [f.message for f in found if f.severity != "fail"]
    return found, "; ".join(warned) or None


def _snapshot(check: reportfile.Check) -> Any:
    """The NVML snapshot the nvml check keeps in its detail (None when it has none)."""
    detail = check.detail_value()
    return detail.get("snapshot") if isinstance(detail, dict) else None


def _job_start(env: dict[str, str]) -> float | None:
    """The job's start (Unix time): slurmd's SLURM_JOB_START_TIME where set, else slurmctld's record."""
    value = env.get("SLURM_JOB_START_TIME", "").strip()
    if value.isdigit():
        return float(value)
    job = env.get("SLURM_JOB_ID", "").strip()
    return kernel_xids.start_from_scontrol(scontrol.show_job(job)) if job else None


def _finding_reason(finding: Finding) -> str:
    gpu = f"GPU{finding.gpu.index}" if finding.gpu is not None else None
    return core.reason(finding.code, gpu, finding.message)


def _drain(node: str, reason: str, code: int, report: Path | None) -> HookResult:
    """Drain, idempotently; a drain an operator made for another reason is left as it is."""
    state = scontrol.node_state(node)
    if state is not None and state.drained and not core.is_ours(state.reason):
        return HookResult(code, node, "kept", state.reason, reason, report)
    if state is None or not state.drained or state.reason != reason:
        scontrol.drain(node, reason)
    return HookResult(code, node, "drained", reason, reason, report)


def _nothing_to_check(report: VerifyReport) -> bool:
    """A CPU-only node where every selected check (the GPU ones) was skipped: nothing to judge."""
    checks = report.checks
    return report.cpu_only and bool(checks) and all(c.status == "skip" for c in checks)


def _skip_reasons(report: VerifyReport) -> str:
    return "; ".join(f"{c.name}: {c.summary}" for c in report.checks)


def _could_not_run_why(run: VerifyRun) -> str:
    if run.report is not None:
        verdict = run.report.verdict
        return verdict.summary if verdict is not None else f"verify exit {run.code}"
    lines = [line.strip() for line in run.stderr_tail.splitlines() if line.strip()]
    errors = [line.split("error:", 1)[1].strip() for line in lines if "error:" in line]
    return (errors or lines or [f"verify exit {run.code}"])[-1]


def _report_path(req: HookRequest, node: str) -> Path | None:
    if req.reports_dir is None:
        return None
    job = os.environ.get("SLURM_JOB_ID")
    name = f"{node}-{req.hook}" + (f"-{job}" if job and req.hook != "health-check" else "")
    return req.reports_dir / f"{name}.json"


def _verify_args(req: HookRequest, report: Path | None) -> list[str]:
    # each check's own limit stays inside the budget, so verify's watchdog names a hung check
    per_check = max(1.0, req.max_time - SLACK - TERM_GRACE)
    args = ["--level", req.level, "--timeout", f"{per_check:.0f}"]
    for name in req.checks:
        args += ["--check", name]
    if req.hook == "epilog" and req.checks == (HEALTH,):
        args.append("--passive")  # what the job left, read in one process: no torch, no load
    if req.expect_gpus:
        args += ["--expect-gpus", str(req.expect_gpus)]
    return args + (["--report", str(report)] if report else [])


def _verify_env(req: HookRequest) -> dict[str, str]:
    """This environment, for a job's hook narrowed to the job's GPUs in the variables of the
    node's vendor (an AMD node: AMD GPUs on the PCI bus and no NVIDIA one, as verify chooses)."""
    env = dict(os.environ)
    if req.hook == "health-check":
        return env
    for name, value in core.job_gpu_env(env, nodes.on_bus(pci.buses_on_pci())).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_verify(args: list[str], max_time: float, report: Path | None, env: dict[str, str]) -> VerifyRun:
    """`gpuenv verify` in its own process group, killed with all it started at the deadline.

    Meant for the one-shot `gpuenv slurm` process: it makes that process a subreaper and, after
    verify, kills every child it has left.
    """
    _become_subreaper()  # orphans of verify (its worker has its own session) come back to us
    with tempfile.TemporaryDirectory(prefix="gpuenv-slurm-") as tmp:
        out = report or Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "gpuenv", "-q", "verify", *args]
        if report is None:
            cmd += ["--report", str(out)]
        with open(Path(tmp) / "stderr", "w+b") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True)
            over = _wait_or_kill(proc, deadline=time.monotonic() + max(1.0, max_time - SLACK))
            _kill_descendants()
            err.seek(0)
            tail = err.read()[-2000:].decode(errors="replace")
        data = None if over else _load(out)
    return VerifyRun(proc.returncode, data, over, tail)


def _wait_or_kill(proc: subprocess.Popen[bytes], *, deadline: float) -> bool:
    """Wait for verify; past the deadline SIGTERM its group (a partial report), then SIGKILL it."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic() - TERM_GRACE))
        return False
    except subprocess.TimeoutExpired:
        pass
    for sig, grace in ((signal.SIGTERM, TERM_GRACE), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
            break
    return True


def _become_subreaper() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def _kill_descendants() -> None:
    """SIGKILL whatever verify left behind (a subreaper inherits it), and reap it."""
    for _ in range(20):
        children = _children(os.getpid())
        if not children:
            return
        for pid in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else os.kill(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _load(path: Path) -> VerifyReport | None:
    """The report verify wrote; None when there is none (verify died before writing it) or it is unreadable."""
    found = reportfile.read(path)
    if isinstance(found, reportfile.Skipped) or not isinstance(found.document, VerifyReport):
        return None
    return found.document
