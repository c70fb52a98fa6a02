"""`gpuenv fleet compat`: which hosts of a fleet run a stack, which with a caveat, which not, and why.

The fleet is read as `fleet report` reads it (gpuenv.fleet.fleet_hosts); each host is judged by the resolver's
own rules (gpuenv.fleet.compat_rules), hosts alike once. The result groups the hosts by reason, each group's
hosts as a host list (python-hostlist, where installed: `gpu[001-012]`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Literal

from gpuenv.errors import BadRequest
from gpuenv.fleet.compat_rules import STATES, WORDS, HostKind, Judge, State, Verdict
from gpuenv.fleet.fleet_hosts import Fleet, FleetHost, read_fleet
from gpuenv.fleet.report_model import HostReport, Skipped
from gpuenv.fleet.rollout import Rollout, rolled_out
from gpuenv.fleet.source import FleetSource, OnHost
from gpuenv.kb import load_kb, staleness_warning
from gpuenv.platforms.registry import for_stack
from gpuenv.stack import Stack

SCHEMA = "gpuenv.fleet-compat/1"
Installed = Literal["image", "host", "pip"]
HOSTS_WORDS: dict[State, str] = {"runs": "run", "caveat": "run with a caveat", "no": "do not run", "unknown": "unknown"}


@dataclass(frozen=True)
class CompatRequest:
    fleet: FleetSource
    rollout: Rollout = field(default_factory=Rollout)
    strict: bool = False  # a caveat fails too


@dataclass(frozen=True)
class HostVerdict:
    host: str
    verdict: Verdict
    report: str | None  # the report judged
    started: str | None


@dataclass(frozen=True)
class Group:
    state: State
    reason: str
    hosts: tuple[str, ...]
    # of a "no": what rules it out ("driver": upgrading it to the floor would do; "native driver": to the driver the
    # CUDA bundles; else the host)
    constraint: str = "host"

    def to_dict(self) -> dict[str, Any]:
        said = {"state": self.state, "reason": self.reason, "count": len(self.hosts), "hosts": compressed(self.hosts)}
        return said | ({"constraint": self.constraint} if self.state == "no" else {})


@dataclass(frozen=True)
class CompatResult:
    stack: Stack
    hosts: tuple[HostVerdict, ...]
    skipped: tuple[Skipped, ...]
    strict: bool
    warnings: tuple[str, ...] = ()  # about the check itself (a stale knowledge base)
    installed: Installed = "image"  # how the stack was judged to reach the hosts

    @property
    def title(self) -> str:
        software = for_stack(self.stack).resolver.software(self.stack)
        return f"torch {self.stack.torch}+{self.stack.build} ({software}, {self.stack.cpu_arch})"

    def counts(self) -> dict[State, int]:
        return {s: sum(h.verdict.state == s for h in self.hosts) for s in reversed(STATES)}

    def groups(self) -> list[Group]:
        """Hosts by (state, reason), worst state first, then the most hosts; the hosts that run, last."""
        by: dict[tuple[State, str, str], list[str]] = {}
        for h in self.hosts:
            for reason in h.verdict.reasons or ("",):
                by.setdefault((h.verdict.state, reason, h.verdict.constraint(reason)), []).append(h.host)
        ordered = sorted(by.items(), key=lambda item: (STATES.index(item[0][0]), -len(item[1]), item[0][1]))
        return [Group(state, reason, tuple(hosts), on) for (state, reason, on), hosts in ordered]

    @property
    def exit_code(self) -> int:
        counts = self.counts()
        bad = counts["no"] + counts["unknown"] + (counts["caveat"] if self.strict else 0)
        return 1 if bad else 0

    def summary(self) -> str:
        counts = self.counts()
        said = ", ".join(f"{n} {HOSTS_WORDS[s]}" for s, n in counts.items() if n)
        return f"{self.title} on {len(self.hosts)} host(s): {said}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "stack": self.stack.to_dict(),
            "summary": self.summary(),
            "strict": self.strict,
            "installed": self.installed,
            "counts": self.counts(),
            "groups": [g.to_dict() for g in self.groups()],
            "hosts": [
                {
                    "host": h.host,
                    "state": h.verdict.state,
                    "verdict": WORDS[h.verdict.state],
                    "reasons": list(h.verdict.reasons),
                    "report": h.report,
                    "started": h.started,
                }
                for h in self.hosts
            ],
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "warnings": list(self.warnings),
        }


def fleet_compat(request: CompatRequest, *, kb_path: Path | None = None) -> CompatResult:
    """The service: the stack rolled out, the fleet read, every host judged."""
    kb = load_kb(kb_path)
    stack, on_host = rolled_out(request.rollout, kb, kb_path=kb_path)
    # refuses a stack the knowledge base does not know before the fleet is read
    judge = Judge(kb, stack, on_host)
    fleet = read_fleet(request.fleet)
    stale = staleness_warning(kb, date.today())
    return judged(judge, fleet, strict=request.strict, warnings=(stale,) if stale else ())


def judged(judge: Judge, fleet: Fleet, *, strict: bool, warnings: tuple[str, ...] = ()) -> CompatResult:
    hosts = tuple(_verdict(judge, h) for h in fleet.hosts)
    return CompatResult(judge.stack, hosts, fleet.skipped, strict, warnings, installed_as(judge.on_host))


def installed_as(on_host: OnHost | None) -> Installed:
    """How the stack reaches the hosts: in an image, as provision installs it, or by pip into the host's Python."""
    if on_host is None:
        return "image"
    return "pip" if on_host.by_pip else "host"


def check_rollout(
    stack: Stack,
    source: FleetSource,
    *,
    kb_path: Path | None,
    strict: bool,
    on_warning: Callable[[str], None],
    on_host: OnHost | None = None,
) -> CompatResult:
    """build-image --fleet and provision --fleet (on_host: how it installs the stack), before they act: a warning
    naming the hosts that cannot run the stack (or are unknown); with strict, a refusal, which a caveat earns too."""
    result = judged(Judge(load_kb(kb_path), stack, on_host), read_fleet(source), strict=strict)
    if result.exit_code == 0:
        return result
    failing = [g for g in result.groups() if g.state != "runs" and (strict or g.state != "caveat")]
    said = "; ".join(f"{WORDS[g.state]}: {compressed(g.hosts)} ({g.reason})" for g in failing)
    message = f"the fleet ({source.named()}) cannot all run {result.title}: {said}"
    if strict:
        raise BadRequest(message, hint="gpuenv resolve --fleet gives the newest stack every host runs")
    on_warning(message)
    return result


def _verdict(judge: Judge, host: FleetHost) -> HostVerdict:
    report = host.report
    if host.doubt is not None or report is None:
        return HostVerdict(host.host, Verdict("unknown", (host.doubt or "no report",)), _path(report), _when(report))
    return HostVerdict(host.host, judge.host(kind_of(report)), report.path, report.started)


def kind_of(report: HostReport) -> HostKind:
    gpus = tuple(dict.fromkeys((g.name or "unnamed GPU", g.code) for g in report.gpus))
    return HostKind(gpus, report.driver, report.cpu_arch, report.os, report.python)


def _path(report: HostReport | None) -> str | None:
    return report.path if report else None


def _when(report: HostReport | None) -> str | None:
    return report.started if report else None


def compressed(hosts: tuple[str, ...] | list[str]) -> str:
    """Host names as one host list (`gpu[001-012],v100-003`), by python-hostlist where installed."""
    try:
        import hostlist  # extra slurm: where installed, host lists are compressed
    except ImportError:
        return ",".join(sorted(hosts))
    text: str = hostlist.collect_hostlist(list(hosts))
    return text
