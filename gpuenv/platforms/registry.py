"""The platforms gpuenv serves, keyed by (platform, CPU architecture), and the only dispatch to them.

`for_request` (what a resolution asks for), `for_stack` (what a stack was resolved for) and `for_host`
(what a host's GPUs and architecture take) are the only places that choose a platform; everything
past them calls the chosen platform's halves. Each platform package names the architectures it
serves; the registry builds one frozen Platform per pair at import, from the architecture's facts.
x86_64 is every platform's; CUDA and CPU are served on aarch64 too, from the knowledge base as published
for it (KnowledgeBase.for_cpu_arch); a platform served on fewer says why (Entry.why_only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gpuenv.errors import BadRequest
from gpuenv.kb import KnowledgeBase
from gpuenv.platforms.arch import ARCHES, DEFAULT_CPU_ARCH, CpuArchFacts, cpu_arch, cpu_arch_named
from gpuenv.platforms.base import Claim, Platform
from gpuenv.platforms.cpu import halves as cpu
from gpuenv.platforms.cuda import halves as cuda
from gpuenv.platforms.rocm import halves as rocm
from gpuenv.resolve.request import Request
from gpuenv.stack import SCHEMA, SCHEMA_V1, Stack
from gpuenv.types import CpuArch, PlatformName, platform_named

if TYPE_CHECKING:  # only annotations: host facts are provision's, off resolve's path
    from gpuenv.provision.hostfacts import GatheredHost


class Entry:
    """A platform package: its name, how it builds its Platform for an architecture, the architectures it serves.
    Typed so that mypy checks each package's Platform against the Protocol, every half and every method."""

    def __init__(
        self,
        name: PlatformName,
        build: Callable[[CpuArchFacts], Platform],
        cpu_arches: tuple[CpuArch, ...],
        why_only: str = "",  # why it is served on these architectures alone, said when another is asked
    ) -> None:
        self.name, self.build, self.cpu_arches, self.why_only = name, build, cpu_arches, why_only


ENTRIES = (  # in the order a request's claims are read and messages list them
    Entry(cuda.NAME, cuda.platform, cuda.CPU_ARCHES),
    Entry(rocm.NAME, rocm.platform, rocm.CPU_ARCHES, rocm.CPU_ARCHES_WHY),
    Entry(cpu.NAME, cpu.platform, cpu.CPU_ARCHES),
)
REGISTRY: Mapping[tuple[PlatformName, CpuArch], Platform] = MappingProxyType(
    {(e.name, arch): e.build(ARCHES[arch]) for e in ENTRIES for arch in e.cpu_arches}
)
DEFAULT_PLATFORM: PlatformName = cuda.NAME  # what a request naming no platform gets: gpuenv's first one


class Wanted:
    """The platform a host is asked to take, and how to say so when its GPUs are another's."""

    def __init__(self, name: PlatformName, says: str) -> None:
        self.name = name
        self.says = says  # "--cuda 12.8 asks for a CUDA stack, which needs"; "a ROCm 6.4 stack needs"


def platforms(arch: CpuArch = DEFAULT_CPU_ARCH) -> tuple[Platform, ...]:
    """The platforms served on `arch` (on x86_64: every one)."""
    return tuple(p for (_, a), p in REGISTRY.items() if a == arch)


def named(name: PlatformName, arch: CpuArch = DEFAULT_CPU_ARCH) -> Platform:
    found = REGISTRY.get((name, arch))
    if found is None:
        entry = next(e for e in ENTRIES if e.name == name)
        served = ", ".join(entry.cpu_arches)
        why = f": {entry.why_only}" if entry.why_only else ""
        others = ", ".join(e.name for e in ENTRIES if arch in e.cpu_arches)
        raise BadRequest(
            f"gpuenv serves {name} stacks on {served}, not {arch}{why}",
            hint=f"on {arch}: --platform {others.replace(', ', ' or ')}; or resolve for --cpu-arch {served}",
        )
    return found


def request_arch(kb: KnowledgeBase, request: Request) -> CpuArch:
    """The CPU a request is for: --cpu-arch (any spelling), else its --gpu's (GH200: aarch64), else x86_64."""
    asked = cpu_arch_named(request.cpu_arch) if request.cpu_arch else None
    gpu = kb.find_gpu(request.gpu) if request.gpu else None
    implied = cpu_arch(gpu.cpu_arch) if gpu and gpu.cpu_arch else None
    if asked and implied and asked.name != implied.name:
        raise BadRequest(
            f"--gpu {request.gpu}: every {gpu.name if gpu else request.gpu} system's CPU is {implied.name}, "
            f"not {asked.name}",
            hint=f"drop --cpu-arch, or give --cpu-arch {implied.name}",
        )
    return (asked or implied or ARCHES[DEFAULT_CPU_ARCH]).name


def claims(kb: KnowledgeBase, request: Request) -> dict[PlatformName, Claim]:
    """Each platform the request's options ask for, with the option that does (--platform, a +build torch,
    --cuda, --rocm, an AMD --gpu)."""
    found: dict[PlatformName, Claim] = {}
    asked = platform_named(request.platform)
    if asked is not None:
        found[asked] = Claim(f"--platform {request.platform}")
    build = (request.torch or "").partition("+")[2]
    for platform in platforms():  # every platform's, whatever the architecture: for_request refuses one not served
        claim = platform.resolver.claims(kb, request)
        if claim is None and build and platform.resolver.owns(build):
            claim = Claim(f"--torch {request.torch}")
        if claim is not None:
            found.setdefault(platform.name, claim)
    return found


def for_request(kb: KnowledgeBase, request: Request) -> Platform:
    """The platform a request asks for (CUDA when it names none); BadRequest when its options ask for two."""
    arch = request_arch(kb, request)
    if request.platform and platform_named(request.platform) is None:
        raise BadRequest(f"unknown platform {request.platform!r}", hint=f"choose one of: {', '.join(_names())}")
    found = claims(kb, request)
    if len(found) > 1:
        raise _conflict(found)
    return named(next(iter(found), DEFAULT_PLATFORM), arch)


def for_build(kb: KnowledgeBase, request: Request) -> Request:
    """--torch VERSION+BUILD as the options the build stands for, checked against the request's others."""
    torch = request.torch or ""
    version, _, build = torch.partition("+")
    for platform in platforms():
        pinned = platform.resolver.pin(kb, request, version, build)
        if pinned is None:
            continue
        for other, claim in claims(kb, pinned).items():
            if other != platform.name:
                flag = claim.option.split()[0]
                raise BadRequest(
                    f"--torch {torch} is a {platform.label} build, but {claim.option} asks for {named(other).label}",
                    hint=f"drop {flag}, or ask for --torch {version}",
                )
        return pinned
    raise BadRequest(f"unknown build {build} in torch version {torch}", hint=f"torch's builds: {_spellings()}")


def platform_of_build(build: str, arch: CpuArch = DEFAULT_CPU_ARCH) -> Platform | None:
    """The platform whose builds torch spells as `build` ("cu126", "rocm6.4", "cpu"), or None."""
    return next((p for p in platforms(arch) if p.resolver.owns(build)), None)


def for_stack(stack: Stack) -> Platform:
    return named(stack.platform, stack.cpu_arch)


def for_host(facts: GatheredHost, wanted: Wanted | None) -> Platform:
    """The platform a host takes: the one asked for, else its GPUs' (a GPU-less host's without); BadRequest
    naming the host when its GPUs are of two platforms, of another than asked, or its architecture is not served."""
    mine = facts.platforms
    if len(mine) > 1:
        vendors = " and ".join(named(p).host.vendor for p in _names() if p in mine)
        raise BadRequest(
            f"{facts.host}: the host mixes {vendors} GPUs ({facts.gpu_label()}); gpuenv installs one driver"
        )
    gpuless = next(p.name for p in platforms() if p.host.pci_vendor is None)
    name = wanted.name if wanted else (mine[0] if mine else gpuless)
    if wanted and mine and mine[0] != name and named(name).host.pci_vendor is not None:
        raise BadRequest(
            f"{facts.host}: {wanted.says} {named(name).host.gpus_wanted}, but the host has {facts.gpu_label()}"
        )
    arch = cpu_arch(facts.architecture)
    found = REGISTRY.get((name, arch.name)) if arch else None
    if found is None:
        served = ", ".join(a for (n, a) in REGISTRY if n == name)
        raise BadRequest(f"architecture {facts.architecture}: gpuenv serves {named(name).label} stacks on {served}")
    return found


def stack_from_dict(data: dict[str, Any]) -> Stack:
    """A stack of schema /2, or /1 (its cuda_build read as the build of the platform that spells it so)."""
    if data.get("schema") != SCHEMA_V1:
        return Stack.from_dict(data)
    build = data.get("cuda_build")
    platform = platform_of_build(build) if isinstance(build, str) else None
    if platform is None:
        raise BadRequest(f"stack cuda_build {build!r} is invalid", hint="regenerate the stack")
    upgraded = {k: v for k, v in data.items() if k != "cuda_build"}
    return Stack.from_dict({**upgraded, "schema": SCHEMA, "platform": platform.name, "build": build})


def checked(stack: Stack) -> Stack:
    """The stack, its values checked: every platform's fields, then its own platform's."""
    for_stack(stack.validate()).resolver.check_stack(stack)
    return stack


def _names() -> tuple[PlatformName, ...]:
    return tuple(e.name for e in ENTRIES)


def _spellings() -> str:
    return "; ".join(f"{p.label}: {p.resolver.builds_spelled}" for p in platforms())


def _conflict(found: dict[PlatformName, Claim]) -> BadRequest:
    """Two platforms asked for: the option that explains itself first ("--gpu MI300X is an AMD GPU …")."""
    (_, a), (_, b) = sorted(found.items(), key=lambda item: item[1].why is None)[:2]
    if a.why:
        return BadRequest(f"{a.why}, not {b.option}", hint=f"drop {b.option.split()[0]}")
    labels = " or ".join(named(p).label for p in found)
    hint = f"a stack is torch's wheels of one platform ({labels}): give one of them"
    return BadRequest(f"{a.option} and {b.option} exclude each other", hint=hint)
