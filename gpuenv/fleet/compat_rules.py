"""Whether a host runs a stack, judged by the resolver's own rules (pure).

A host is what its newest verify report says of it: its GPUs (each one's code as `--gpu` spells it, sm_90 or
gfx942), its driver and its CPU architecture. Its verdict is the one `resolve` gives: the stack's platform's
resolution of `--torch VERSION+BUILD --gpu CODE --driver DRIVER` on the stack's OS, whose `why_not` rules the
build out (no GPU code for the device, a driver that cannot run its CUDA), and whose pinned stack's warnings,
beyond those of the same stack for no host in particular, are the caveats (PTX JIT, minor-version
compatibility). No second table: `tests/fleet/test_compat_rules.py` holds this equal to `resolve` over every
GPU model and build of the knowledge base. A fact the report lacks makes the host unknown, never "runs".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

from gpuenv.errors import BadRequest
from gpuenv.fleet.source import OnHost
from gpuenv.kb import KnowledgeBase, OsInfo, TorchRelease, in_cuda_image
from gpuenv.platforms.arch import cpu_arch as arch_named
from gpuenv.platforms.base import Platform
from gpuenv.platforms.registry import for_build, for_request, for_stack
from gpuenv.provision.hostfacts import GatheredGpu, GatheredHost
from gpuenv.resolve.candidates import Candidate, Resolution
from gpuenv.resolve.request import Request, pick_python, python_problem
from gpuenv.stack import Stack

State = Literal["runs", "caveat", "no", "unknown"]
STATES: tuple[State, ...] = ("no", "unknown", "caveat", "runs")  # worst first
WORDS: dict[State, str] = {
    "runs": "runs",
    "caveat": "runs with a caveat",
    "no": "does not run",
    "unknown": "unknown",
}
NO_ARCH = "its report does not record the CPU architecture (written by an older gpuenv): not checked"
NO_OS = "its report does not record the host's OS (written by an older gpuenv, or inside a container): not checked"


@dataclass(frozen=True)
class Verdict:
    state: State
    reasons: tuple[str, ...] = ()  # why not, why unknown, or the caveats
    # of a "no": what ruled it out, per reason, as the resolver names its constraints ("driver", "gpu"), or "host"
    constraints: tuple[str, ...] = ()

    def constraint(self, reason: str) -> str:
        found = dict(zip(self.reasons, self.constraints, strict=False))  # only a no's has constraints
        return found.get(reason, "host")


RUNS = Verdict("runs")


class HostKind(NamedTuple):
    """What decides a host's verdict: hosts alike are judged once."""

    gpus: tuple[tuple[str, str | None], ...]  # each distinct (GPU name, its code: sm_90, gfx942; None: unread)
    driver: str | None
    cpu_arch: str | None
    os: str | None = None  # the host's, as the knowledge base names OSes; None: not recorded
    python: str | None = None  # the Python that ran verify on the host


def worst(verdicts: list[Verdict]) -> Verdict:
    """The worst state among the verdicts, with every reason given for it."""
    if not verdicts:
        return RUNS
    state = min((v.state for v in verdicts), key=STATES.index)
    said = {r: v.constraint(r) for v in verdicts if v.state == state for r in v.reasons}
    return Verdict(state, tuple(said), tuple(said.values()))


class Judge:
    """One stack's verdicts, each kind of host judged once."""

    def __init__(self, kb: KnowledgeBase, stack: Stack, on_host: OnHost | None = None) -> None:
        self.kb, self.stack = kb, stack
        self.on_host = on_host  # how it is installed on a host; None: not there (an image brings its OS and Python)
        # not on the host: in an image built on its platform's base image (nvidia/cuda's carries cuda-compat)
        self.image = on_host is None
        self.platform = for_stack(stack)
        self.torch = _release(kb, stack)
        self.os_info = kb.os_by_name.get(stack.os)
        if self.os_info is None:
            raise BadRequest(f"the stack's OS {stack.os} is not in the knowledge base", hint="resolve the stack again")
        baseline = self._resolution(Request())
        if stack.build not in baseline.builds(self.torch)[0]:
            raise _not_known(stack)
        self.baseline = set(self._warnings(baseline))
        self._known: dict[HostKind, Verdict] = {}

    def host(self, kind: HostKind) -> Verdict:
        found = self._known.get(kind)
        if found is None:
            found = self._known[kind] = self._judge(kind)
        return found

    def _judge(self, kind: HostKind) -> Verdict:
        verdicts = [self._arch(kind.cpu_arch), self._host_os(kind.os, kind.python)]
        if self.platform.host.pci_vendor is None:  # a build that needs no GPU runs beside any
            unused = f"a {self.platform.label} build: the host's GPUs go unused"
            verdicts.append(Verdict("caveat", (unused,)) if kind.gpus else RUNS)
        elif not kind.gpus:
            verdicts.append(Verdict("unknown", ("its report names no GPU",)))
        else:
            verdicts += [self._gpu(name, code, kind.driver) for name, code in kind.gpus]
        return worst(verdicts)

    def _arch(self, name: str | None) -> Verdict:
        if name is None:
            return Verdict("caveat", (NO_ARCH,))
        facts = arch_named(name)
        if facts is None:
            return Verdict("unknown", (f"its CPU architecture {name} is not one gpuenv knows",))
        if facts.name != self.stack.cpu_arch:
            return Verdict("no", (f"the stack is built for {self.stack.cpu_arch}, the host is {facts.name}",))
        return RUNS

    def _host_os(self, name: str | None, python: str | None) -> Verdict:
        """A stack installed on the host, on the host's OS: resolve's rules for the build there (an OS its
        platform is not served on, a Python the OS cannot give), provision's refusal, and what that OS adds."""
        on = self.on_host
        if on is None:
            return RUNS
        if name is None:
            return Verdict("caveat", (NO_OS,))
        os_info = self.kb.os_by_name.get(name)
        if os_info is None or "host" not in os_info.roles:
            return Verdict("unknown", (f"its OS {name} is not one the knowledge base knows as a host's",))
        os_info = replace(os_info, roles=("host",))  # no image of the OS is involved
        stack = self.stack
        asked = Request(torch=f"{stack.torch}+{stack.build}", os=name, python=on.python, cpu_arch=stack.cpu_arch)
        resolution = self.platform.resolver.start(self.kb, for_build(self.kb, asked), os_info)
        refused = self._refused_on(os_info, on, resolution)
        if refused is not None:
            return Verdict("no", (refused[1],), (refused[0],))
        chosen = Candidate(self.torch, stack.build, pick_python(self.torch, os_info, on.python) or stack.python)
        said = [w for w in resolution.stack(chosen, [chosen], ()).warnings if w not in self.baseline]
        if on.os is not None and on.os != name:
            said.insert(0, f"the stack was resolved for {on.os}, the host runs {name}: resolve it with --os {name}")
        if on.by_pip and on.python is not None and python not in (None, on.python):
            how = os_info.python[on.python].note
            said.append(f"the host runs Python {python}, the lockfile's wheels Python {on.python}: install it ({how})")
        return Verdict("caveat", tuple(said)) if said else RUNS

    def _refused_on(self, os_info: OsInfo, on: OnHost, resolution: Resolution) -> tuple[str, str] | None:
        """What rules the stack out on the host's OS, and the constraint that does, in the order resolve asks."""
        if on.only_os and on.os != os_info.name:
            return "os", f"the host runs {os_info.name}, --os asks for {on.os}"
        refused = resolution.why_not(self.torch, self.stack.build)
        if refused is not None:
            return refused
        if pick_python(self.torch, os_info, on.python) is None:
            return "python", python_problem(self.torch, os_info, on.python)
        if on.by_pip:  # pip needs no more of the OS; provision refuses an OS its roles do not implement
            return None
        facts = GatheredHost("", "", os_info.version, os_info.name, self.stack.cpu_arch, "", False)
        said = self.platform.host.refusal(self.kb, self.stack, facts, None)
        return ("os", said) if said else None

    def _gpu(self, name: str, code: str | None, driver: str | None) -> Verdict:
        label = f"{name} ({code})" if code else name
        if code is None:
            return Verdict("unknown", (f"its report gives no compute capability or gfx target for {name}",))
        try:
            mine = for_request(self.kb, Request(gpu=code))
        except BadRequest as exc:
            return Verdict("unknown", (f"{label}: {exc.message}",))
        if mine.name != self.platform.name:
            wanted = self.platform.host.gpus_wanted
            return Verdict("no", (f"a {self.platform.label} build needs {wanted}; {label} is {mine.host.vendor}'s",))
        if driver is None and _driver(mine, name, code, "0") is not None:
            return Verdict("unknown", ("its report does not give the driver version",))
        spelled = name if self._knows(mine, name) else code  # a model may know more than its code (ROCm's floor)
        try:
            resolution = self._resolution(Request(gpu=spelled, driver=driver and _driver(mine, name, code, driver)))
        except BadRequest as exc:
            return Verdict("unknown", (f"{label}: {exc.message}",))
        refused = resolution.why_not(self.torch, self.stack.build)
        in_image = self._in_image(resolution)  # an image's cuda-compat decides a driver older than its CUDA's
        if in_image is not None and in_image[0] == "no" and refused is None:  # only the driver CUDA bundles runs it
            return Verdict("no", (in_image[1],), ("native driver",))
        compat = in_image[1] if in_image is not None and in_image[0] == "caveat" else None
        if refused is not None and not (refused[0] == "driver" and compat):
            return Verdict("no", (refused[1],), (refused[0],))
        said = (compat,) if refused is not None and compat else ()  # resolve's own warning names it otherwise
        caveats = [*said, *(w for w in self._warnings(resolution) if w not in self.baseline)]
        return Verdict("caveat", tuple(caveats)) if caveats else RUNS

    def _in_image(self, resolution: Resolution) -> tuple[Literal["caveat", "no"], str] | None:
        """How the image's forward-compatibility package fares on the host (None: a host stack, or no package)."""
        forward = resolution.forward_compat(self.stack.build) if self.image else None
        return in_cuda_image(forward) if forward is not None else None

    def _knows(self, platform: Platform, name: str) -> bool:
        """Whether the knowledge base knows the GPU by the name its report gives."""
        assert self.os_info is not None
        try:
            platform.resolver.start(self.kb, Request(gpu=name), self.os_info)
        except BadRequest:
            return False
        return True

    def _resolution(self, host: Request) -> Resolution:
        """The stack's own resolution, as `resolve --torch VERSION+BUILD` with the host's constraints makes it."""
        stack = self.stack
        asked = Request(
            torch=f"{stack.torch}+{stack.build}",
            gpu=host.gpu,
            driver=host.driver,
            os=stack.os,
            python=stack.python,
            cpu_arch=stack.cpu_arch,
        )
        assert self.os_info is not None
        return self.platform.resolver.start(self.kb, for_build(self.kb, asked), self.os_info)

    def _warnings(self, resolution: Resolution) -> tuple[str, ...]:
        chosen = Candidate(self.torch, self.stack.build, self.stack.python)
        return resolution.stack(chosen, [chosen], ()).warnings


def _release(kb: KnowledgeBase, stack: Stack) -> TorchRelease:
    found = next((t for t in kb.torch if t.version == stack.torch), None)
    if found is None:
        raise _not_known(stack)
    return found


def _not_known(stack: Stack) -> BadRequest:
    return BadRequest(
        f"torch {stack.torch}+{stack.build} is not in the knowledge base",
        hint="give the knowledge base that knows it with --data, or resolve the stack again",
    )


def _driver(platform: Platform, name: str, code: str, driver: str) -> str | None:
    """The host's driver as a constraint of its platform's builds (through the host half), or None: no constraint."""
    gpu = GatheredGpu("", name, None, code, platform.name, name)
    facts = GatheredHost("", "", "", None, "", "", False, gpus=(gpu,), driver=driver)
    return platform.host.kept_driver(facts)
