"""The Platform Protocol: what every platform (CUDA, ROCm, CPU) answers, in halves, one per command's need.

- resolve: which requests ask for it, its spellings, its candidates, refusals, ranking and reasons (bound
  to one request as a `gpuenv.resolve.candidates.Resolution`), its wheel index, how a stack of it reads;
- image: which base image a build starts from, its labels, the Dockerfile's platform pieces (comments,
  environment, devel tools), what a wheelhouse must hold;
- host: whose GPUs it serves (PCI vendor, device ids), a host's stack and why a host cannot take one, the
  driver it installs (role variables, the plan shown before anything runs);
- node: which management library reads its GPUs on a node, which variables pick them, what the health
  rules read (gpuenv.platforms.node: a `GpuNode`, or `Unsupported` for a platform without GPUs).

A feature a platform lacks is answered, not skipped: `Unsupported` carries the reason a user reads.
Each platform package builds one frozen `Platform` for a CPU architecture (gpuenv.platforms.arch);
gpuenv.platforms.registry holds them and is the only dispatch. mypy (strict) checks each against these
Protocols where the registry builds it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar

from gpuenv.errors import BadRequest
from gpuenv.kb import KnowledgeBase, OsInfo
from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.node import NodeHalf, Unsupported
from gpuenv.resolve.candidates import Resolution
from gpuenv.resolve.request import Request
from gpuenv.stack import Stack
from gpuenv.types import PlatformName

if TYPE_CHECKING:  # only annotations: the options' modules import package metadata, off resolve's path
    from gpuenv.provision.hostfacts import GatheredHost
    from gpuenv.provision.options import ProvisionOptions
    from gpuenv.render.options import ImageOptions

Row = tuple[str, str, str | None]  # a line of `resolve`'s text: label, value, the reason's key
Resolver = Callable[[KnowledgeBase, Request], Stack]  # gpuenv.resolve.service.resolve, handed to the host half


class Claim(NamedTuple):
    """An option of a request that asks for one platform, and what it says of itself when another contradicts it."""

    option: str  # "--cuda 12.4", "--gpu MI300X"
    why: str | None = None  # "--gpu MI300X is an AMD GPU (gfx942): it runs torch's ROCm builds"


class ResolveHalf(Protocol):
    @property
    def option(self) -> str:
        """The request's field that asks for this platform ("cuda", "rocm"; "platform" for CPU)."""

    @property
    def spellings(self) -> str:
        """The forms its option takes, for hints ("12.4, 12.4.1, 12 … or cu124")."""

    @property
    def builds_spelled(self) -> str:
        """How torch names its builds of the platform, for hints ("cu118, cu124, …")."""

    def claims(self, kb: KnowledgeBase, request: Request) -> Claim | None:
        """The option of the request that asks for this platform, or None."""

    def owns(self, build: str) -> bool:
        """Whether torch's wheel build `build` ("cu124", "rocm6.4", "cpu") is spelled as this platform's."""

    def asks(self, build: str) -> dict[str, str]:
        """The request's options one of its builds stands for: {"cuda": "cu126"}, {"platform": "cpu"}."""

    def release(self, text: str) -> str | None:
        """The release its option's value names ("cu124" is 12.4, "rocm6.4" is 6.4), or None: not a spelling of it."""

    def pin(self, kb: KnowledgeBase, request: Request, version: str, build: str) -> Request | None:
        """--torch VERSION+BUILD as the request's own options, or None when BUILD is not this platform's."""

    def start(self, kb: KnowledgeBase, request: Request, os_info: OsInfo) -> Resolution:
        """The request's resolution on this platform, its inputs checked (BadRequest: what is wrong)."""

    def rows(self, stack: Stack) -> list[Row]:
        """The stack's platform lines in `resolve`'s text."""

    def software(self, stack: Stack) -> str:
        """The GPU software a stack of it runs on, in words: "CUDA 12.4.1", "ROCm 6.4", "no GPU (CPU build)"."""

    def check_stack(self, stack: Stack) -> None:
        """BadRequest unless the platform's own fields of the stack hold what it writes."""


class GpuFound(NamedTuple):
    """What a platform's device-id table says of a GPU of its vendor that a host's PCI bus holds."""

    model: str | None  # the knowledge base's name, "H100"; None: not in the table
    code: str | None  # its GPU code: a compute capability "9.0", a gfx target "gfx942"
    label: str  # "H100 (sm_90)", "unknown 10de:2330"
    name: str  # what to call it when the host named it not: "NVIDIA device 10de:2330"
    wire: tuple[tuple[str, str | None], ...]  # its keys in provision's JSON ("sm"; "vendor", "gfx")


class ImageText(NamedTuple):
    """The Dockerfile's platform pieces, as lines the template writes as they are."""

    header: tuple[str, ...]  # the comment lines under the title: what the image needs on the host
    python_base: str  # what the python-base stage adds to the base image
    pip_note: str | None  # a comment above the torch install
    env: tuple[tuple[str, str], ...]  # the final stage's environment (PATH first), before GPUENV_STACK


class ImageHalf(Protocol):
    @property
    def images(self) -> str:
        """Whose base images the platform builds on ("nvidia/cuda"), for refusals."""

    @property
    def wheelhouse_needs(self) -> tuple[str, ...]:
        """Distributions its torch wheels take from their own index, which a wheelhouse must hold."""

    def variant(self, stack: Stack, options: ImageOptions) -> str:
        """Which of the stack's base images the options pick."""

    def unsupported(self, stack: Stack, options: ImageOptions) -> Unsupported | None:
        """An option the platform has no use for (cuDNN on ROCm), or None."""

    def labels(self, stack: Stack, options: ImageOptions) -> dict[str, str]:
        """Its labels of the GPU software and the build, by name without the io.gpuenv. prefix."""

    def host_labels(self, stack: Stack) -> dict[str, str]:
        """Its labels of what the host needs: the driver, the GPU the stack was resolved for."""

    def text(self, stack: Stack, options: ImageOptions) -> ImageText:
        """The Dockerfile's platform pieces."""

    def notes(self, stack: Stack, options: ImageOptions, variant: str) -> list[str]:
        """What build-image says about the base and the flavour."""


class HostHalf(Protocol):
    @property
    def pci_vendor(self) -> str | None:
        """Whose GPUs the platform serves, by PCI vendor id; None: a platform that needs none."""

    @property
    def gpus_wanted(self) -> str:
        """What a stack of it needs on a host, in words ("NVIDIA GPUs")."""

    @property
    def vendor(self) -> str:
        """Whose GPUs, in a word ("NVIDIA", "AMD")."""

    def identify(self, kb: KnowledgeBase, device_id: str) -> GpuFound:
        """A GPU of its vendor on a host's PCI bus: its model and GPU code through the device-id table."""

    def matches(self, kb: KnowledgeBase, gpu: str, facts: GatheredHost) -> bool | None:
        """Whether every GPU of the host is the one --gpu names; None: --gpu names none of this platform's."""

    def stack(self, kb: KnowledgeBase, constraints: Request, facts: GatheredHost, resolve: Resolver) -> Stack:
        """The host's stack, resolved for its GPUs; BadRequest: why the host gets none."""

    def refusal(self, kb: KnowledgeBase, stack: Stack, facts: GatheredHost, kept_driver: str | None) -> str | None:
        """Why the host cannot take a stack of this platform (pinned, or resolved), or None."""

    def warnings(self, facts: GatheredHost, *, skip_driver: bool) -> list[str]:
        """What the host's facts warn of before anything is resolved (GPUs not in the device-id table)."""

    def kept_driver(self, facts: GatheredHost) -> str | None:
        """The loaded driver --skip-driver keeps as a constraint, or None."""

    def variables(self, kb: KnowledgeBase, stack: Stack, options: ProvisionOptions) -> dict[str, Any]:
        """The driver roles' variables (BadRequest for an option it cannot honour)."""

    def driver_plan(
        self, kb: KnowledgeBase, stack: Stack, facts: GatheredHost, options: ProvisionOptions
    ) -> dict[str, Any]:
        """What happens to the host's driver, as the playbooks' own filter decides it, with an `action_line`."""


class Platform(Protocol):
    @property
    def name(self) -> PlatformName: ...

    @property
    def label(self) -> str:
        """ "CUDA", "ROCm", "CPU"."""

    @property
    def cpu_arch(self) -> CpuArchFacts: ...

    @property
    def resolver(self) -> ResolveHalf: ...

    @property
    def image(self) -> ImageHalf: ...

    @property
    def host(self) -> HostHalf: ...

    @property
    def node(self) -> NodeHalf: ...


ResolveT = TypeVar("ResolveT")
ImageT = TypeVar("ImageT")
HostT = TypeVar("HostT")


class Halves(Generic[ResolveT, ImageT, HostT]):
    """A platform as its package builds it: its name and CPU architecture, its resolve, image and host halves'
    own types (mypy checks them against the Protocols wherever a `Halves` is taken for a `Platform`) and its
    node half."""

    def __init__(
        self,
        name: PlatformName,
        label: str,
        cpu_arch: CpuArchFacts,
        resolver: ResolveT,
        image: ImageT,
        host: HostT,
        node: NodeHalf,
    ) -> None:
        self.name, self.label, self.cpu_arch = name, label, cpu_arch
        self.resolver, self.image, self.host, self.node = resolver, image, host, node


def skipped_plan(facts: GatheredHost, why: str) -> dict[str, Any]:
    """A driver plan that installs nothing (--skip-driver, or a stack that needs no driver), with its action line."""
    loaded = facts.driver or facts.amdgpu
    kept = f"keep the loaded {loaded}" if loaded else "no driver loaded, none installed"
    return {"action": "skip", "reason": why, "summary": f"skipped: {why}", "action_line": f"{kept} ({why})"}


def unknown_gpu(kb: KnowledgeBase, gpu: str, message: str | None = None) -> BadRequest:
    """The refusal of a GPU no model is named by: the nearest models of either vendor, else every one."""
    near = kb.gpus_like(gpu)
    also = "a compute capability (sm_90, 9.0) or an AMD gfx target (gfx942)"
    if near:
        hint = f"did you mean {' or '.join(filter(None, (', '.join(near[:-1]), near[-1])))}? or {also}"
    else:
        hint = f"known: {', '.join(g.name for g in kb.models)}; or {also}"
    return BadRequest(message or f"unknown GPU {gpu!r}", hint=hint)
