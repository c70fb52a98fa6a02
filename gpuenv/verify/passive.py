"""`gpuenv verify --check nvml --passive`: the nvml check's idle reading, judged by the same
policy, in this process: no torch, no worker process, no load, no CUDA context. What it reads:
ECC, retired pages and row remaps, XIDs during the read, NVLink and the NVSwitch fabric, PCIe
width, processes and memory held, persistence, compute and MIG mode, temperature, power limits
and the clock-event reasons at idle. The Slurm epilog runs it after every job."""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuenv import __version__
from gpuenv.platforms import nodes
from gpuenv.verify.checks.nvml.events import watch_findings, xid_findings
from gpuenv.verify.checks.nvml.policy import load_policy
from gpuenv.verify.checks.nvml.snapshot import judge
from gpuenv.verify.checks.nvml.under_load import LoadStarter, gpu_load
from gpuenv.verify.context import CheckContext
from gpuenv.verify.facts import HostFacts, bus_fields, gpu_node_note, loads
from gpuenv.verify.facts import host_facts as facts_from
from gpuenv.verify.launch import host_identity
from gpuenv.verify.model import HEALTH, CheckResult, Report, decide, status_from_findings
from gpuenv.verify.options import VerifyOptions
from gpuenv.verify.pci import buses_on_pci, driver_gpus, pci_scope
from gpuenv.verify.probe import probe as probe_node


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_passive(opts: VerifyOptions) -> Report:
    """The passive nvml check as a whole report (one check)."""
    started, clock = _now(), time.monotonic()
    host = host_facts(opts)
    device = "cpu" if opts.device == "cpu" else "cuda" if opts.device == "cuda" or _gpu_node(host) else "cpu"
    ctx = CheckContext(level=opts.level, device=device, expect_gpus=opts.expect_gpus, policy=opts.policy, host=host)
    result = watched(ctx, passive=True)
    result.duration_s = time.monotonic() - clock
    return Report(
        level=opts.level,
        device=device,
        cpu_only=device == "cpu",
        started=started,
        finished=_now(),
        gpuenv_version=__version__,
        host={
            **host_identity(),
            "device_decision": _decision(host),
            "gpus": [asdict(g) for g in host.gpus],
            "pci_nvidia": list(host.pci_nvidia),
            "pci_scope": host.pci_scope,
        },
        stack={},
        checks=[result],
        verdict=decide([result], strict=opts.strict, cpu_only=device == "cpu", interrupted=None),
        options={
            "checks": [HEALTH],
            "passive": True,
            "strict": opts.strict,
            "expect_gpus": opts.expect_gpus,
            "device": opts.device,
            "timeout_s": opts.timeout,
        },
        timings={"total": round(time.monotonic() - clock, 3)},
    )


def watched(ctx: CheckContext, *, passive: bool, start_load: LoadStarter = gpu_load) -> CheckResult:
    """The nvml check in this process (under `start_load`'s load unless `passive`), with the XIDs
    NVML reported meanwhile and what of the XID watch could not be set up."""
    watch: dict[str, Any] = {}
    unwatched = []
    management = nodes.for_smi(ctx.host.smi).management
    if ctx.host.loaded:  # a library without XID events (AMD SMI) registers none
        unwatched = management.register_xids(watch, len(ctx.host.gpus))
    result = judge(ctx, passive=passive, start_load=start_load)
    events, failed = management.drain_xids(watch) if watch else ([], None)
    during = "the passive read" if passive else "the check"
    _add_xids(result, events, unwatched + ([{"gpu": None, **failed}] if failed else []), ctx, during)
    return result


def host_facts(opts: VerifyOptions) -> HostFacts:
    """The engine's probe, in this process: the PCI bus, and the management libraries' GPUs (NVML's,
    else AMD SMI's: gpuenv.platforms.nodes) unless --device cpu."""
    buses, scope = buses_on_pci(), pci_scope()
    probe: dict[str, Any] = {"nvml": "not probed (--device cpu)"}
    if opts.device != "cpu":
        probe = nodes.probed(probe_node, loads, buses)[1]
    listed = driver_gpus()
    return facts_from(probe, **bus_fields(buses), driver_gpus=listed, scope=scope, environ=os.environ)


def _decision(host: HostFacts) -> str:
    node = nodes.for_smi(host.smi)
    return f"passive: {node.library} {host.nvml}, {len(host.on_bus())} {node.vendor} GPU(s) on the PCI bus"


def _gpu_node(host: HostFacts) -> bool:
    return gpu_node_note(host) is not None


def _add_xids(
    result: CheckResult, events: list[Any], failed: list[dict[str, Any]], ctx: CheckContext, during: str
) -> None:
    """The XIDs seen during the read, and the XID watch's calls that failed."""
    if not events and not failed:
        return
    policy = load_policy(Path(ctx.policy) if ctx.policy else None)
    result.findings.extend(xid_findings(events, ctx.host.gpus, policy, during=during))
    result.findings.extend(watch_findings(failed, ctx.host.gpus, policy))
    result.status = status_from_findings(result.findings)
