"""The pure half of the Slurm hooks: reason text, whose drain it is, slurm.conf lines."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuenv.platforms import nodes
from gpuenv.platforms.node import GpuNode

if TYPE_CHECKING:  # the hooks' commands load this module: the reader (msgspec) only where a report is read
    from gpuenv.verify.reportfile import VerifyReport

REASON_PREFIX = "gpuenv:"
# Slurm keeps a reason of any length, but sinfo -R, squeue and most dashboards show one short line;
# gpuenv keeps every reason to one line of at most this many characters.
REASON_MAX = 200
NOT_CERTIFIED = ("fail", "timeout", "crash")
HEALTH_CHECK_MAX_TIME = 55.0  # slurmd kills a HealthCheckProgram after 60 s


@dataclass(frozen=True)
class Problem:
    """The first thing wrong in a verify report: a finding code, the GPU it names, a message."""

    code: str
    gpu: str | None
    message: str


def reason(*parts: str | None) -> str:
    """`gpuenv: <parts>` on one line, within REASON_MAX characters."""
    text = " ".join(" ".join(p.split()) for p in parts if p)
    line = f"{REASON_PREFIX} {text}".strip()
    return line if len(line) <= REASON_MAX else line[: REASON_MAX - 3].rstrip() + "..."


def is_ours(node_reason: str | None) -> bool:
    """A drain gpuenv made (only those may gpuenv resume)."""
    return bool(node_reason) and str(node_reason).startswith(REASON_PREFIX)


def first_problem(report: VerifyReport) -> Problem | None:
    """The first failing finding of the first check that is not certified, or that check itself."""
    for check in report.checks:
        if check.status not in NOT_CERTIFIED:
            continue
        for finding in check.findings:
            if finding.severity == "fail":
                # `code` (<check>.<rule>) where the report has it; the check name otherwise
                gpu = finding.gpu
                label = f"GPU{gpu.index}" if gpu is not None and gpu.index is not None else None
                return Problem(finding.code or check.name, label, finding.message)
        return Problem(f"{check.name}.{check.status}", None, check.summary)
    return None


def failure_reason(report: VerifyReport) -> str:
    problem = first_problem(report)
    if problem is None:
        return reason("verify", report.verdict.summary if report.verdict is not None else "not certified")
    return reason(problem.code, problem.gpu, problem.message)


def could_not_run_reason(why: str) -> str:
    return reason("could not run:", why.removeprefix("could not run: "))


def job_gpus(env: dict[str, str], node: GpuNode = nodes.GPU_NODES[0]) -> str | None:
    """The job's GPUs as the node's first job variable wants them (CUDA_VISIBLE_DEVICES; on AMD
    ROCR_VISIBLE_DEVICES): the variables the job has, else SLURM_JOB_GPUS."""
    return _first(env, (*node.job_variables, "SLURM_JOB_GPUS", "SLURM_STEP_GPUS"))


def _first(env: dict[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def job_gpu_env(env: dict[str, str], node: GpuNode) -> dict[str, str | None]:
    """What verify's environment needs so it reads the job's GPUs only: a variable to set, or None
    to remove. NVIDIA: CUDA_VISIBLE_DEVICES. AMD: ROCR_VISIBLE_DEVICES alone, since HIP's and
    CUDA's would then pick among the ROCR list, not among every GPU."""
    gpus = job_gpus(env, node)
    if not gpus:
        return {}
    first, *others = node.job_variables
    return {first: gpus, **dict.fromkeys(others)}


def candidate_node_names(env: dict[str, str], hostname: str) -> list[str]:
    """Names to try, best first: slurmd's own (SLURMD_NODENAME), the short host name, the full one."""
    names = [env.get("SLURMD_NODENAME", "").strip(), hostname.split(".")[0], hostname]
    return list(dict.fromkeys(n for n in names if n))


_SAFE = re.compile(r"^[A-Za-z0-9._/+@=:-]+$")


@dataclass(frozen=True)
class ConfigRequest:
    gpuenv: str  # the gpuenv executable slurmd runs
    scripts_dir: str
    reports_dir: str
    interval: int
    node_state: str


def wrapper_script(gpuenv: str, subcommand: str, args: list[str]) -> str:
    """A script for slurm.conf (which takes a path, not a command line)."""
    line = " ".join([gpuenv, "-q", "slurm", subcommand, *args])
    return f"#!/bin/sh\nexec {line}\n"


def config_lines(req: ConfigRequest) -> list[str]:
    """The slurm.conf lines that wire gpuenv in (the scripts themselves come from wrapper_script)."""
    for value in (req.gpuenv, req.scripts_dir, req.reports_dir):
        if not _SAFE.match(value):
            raise ValueError(f"{value!r}: paths in slurm.conf must be plain (no spaces or shell characters)")
    return [
        f"HealthCheckProgram={req.scripts_dir}/gpuenv-health-check",
        f"HealthCheckInterval={req.interval}",
        f"HealthCheckNodeState={req.node_state}",
        f"Prolog={req.scripts_dir}/gpuenv-prolog",
        f"Epilog={req.scripts_dir}/gpuenv-epilog",
        "PrologFlags=Alloc",
    ]


HOOK_NAMES = ("health-check", "prolog", "epilog")
# a hook script gpuenv wrote: what `slurm install` may replace (anything else it leaves alone)
_OUR_SCRIPT = re.compile(r"#!/bin/sh\nexec \S+ -q slurm (health-check|prolog|epilog)( [^\n]*)?\n\Z")


def hook_script(gpuenv: str, hook: str, reports_dir: str) -> str:
    """The script slurm.conf names for a hook (health-check within slurmd's 60 s)."""
    args = ["--reports-dir", reports_dir] + (["--max-time", "50"] if hook == "health-check" else [])
    return wrapper_script(gpuenv, hook, args)


def hook_scripts(req: ConfigRequest) -> dict[str, str]:
    """File name -> text of the three hook scripts, for the paths config_lines names."""
    config_lines(req)  # the same paths: plain, or ValueError
    return {f"gpuenv-{hook}": hook_script(req.gpuenv, hook, req.reports_dir) for hook in HOOK_NAMES}


def is_our_script(text: str) -> bool:
    return _OUR_SCRIPT.match(text) is not None
