"""CPU's resolve half: torch's +cpu wheels (download.pytorch.org/whl/cpu), for a machine without a GPU. Pure.

A request is for the CPU when it says so: --platform cpu, a torch version with the +cpu local tag (or uv's
--torch-backend cpu). Every torch release publishes +cpu wheels, so the builds of a release are that one;
an image starts from the OS's own image (the knowledge base's OS row). Usable builds rank by: fit for a
default, then the newest torch. A GPU or a GPU driver is a constraint a CPU stack has no use for: said so.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuenv.errors import BadRequest
from gpuenv.kb import ForwardCompat, KnowledgeBase, OsInfo, TorchRelease, V
from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.base import Claim, Row
from gpuenv.platforms.node import Unsupported
from gpuenv.resolve.candidates import Candidate, Refused
from gpuenv.resolve.ranking import fit_for_default
from gpuenv.resolve.request import Request, numpy_requirement
from gpuenv.stack import NONE, Rejected, Stack

BUILD = "cpu"  # torch's CPU-only wheels: 2.13.0+cpu
RANK_WORDS = ("not settled (unconfirmed builds or no torchvision yet): give --torch to use it", "an older release")


def base_images(os_info: OsInfo) -> dict[str, str]:
    """The OS's own image for both flavours: a CPU image needs no GPU software in its base."""
    if "image" not in os_info.roles or os_info.image is None:
        return {}
    return {"runtime": os_info.image, "devel": os_info.image}


def unsupported(request: Request) -> Unsupported | None:
    """--gpu and --driver: what a CPU stack has no use for."""
    if request.gpu:
        return Unsupported(
            f"--gpu {request.gpu}: a CPU stack runs on no GPU", "drop --gpu, or drop --platform cpu for the GPU's"
        )
    if request.driver:
        return Unsupported(f"--driver {request.driver}: a CPU stack needs no GPU driver", "drop --driver")
    return None


class CpuResolve:
    option = "platform"
    spellings: str = "cpu"
    builds_spelled: str = BUILD

    def __init__(self, cpu_arch: CpuArchFacts) -> None:
        self.cpu_arch = cpu_arch

    def claims(self, kb: KnowledgeBase, request: Request) -> Claim | None:
        return None  # only --platform cpu or a +cpu torch ask for it (gpuenv.platforms.registry reads both)

    def owns(self, build: str) -> bool:
        return build == BUILD

    def asks(self, build: str) -> dict[str, str]:
        return {"platform": BUILD}

    def release(self, text: str) -> str | None:
        return "" if text == BUILD else None

    def pin(self, kb: KnowledgeBase, request: Request, version: str, build: str) -> Request | None:
        """--torch 2.5.1+cpu is --torch 2.5.1 --platform cpu."""
        return replace(request, torch=version, platform=BUILD) if self.owns(build) else None

    def start(self, kb: KnowledgeBase, request: Request, os_info: OsInfo) -> CpuResolution:
        refused = unsupported(request)
        if refused is not None:
            raise refused.refuse()
        return CpuResolution(kb, request, os_info, self.cpu_arch)

    def rows(self, stack: Stack) -> list[Row]:
        return [
            ("build", stack.build, "build"),
            ("Python", f"{stack.python} ({stack.python_source.via})", "python"),
            ("OS", stack.os, "os"),
            ("wheel index", stack.index_url, None),
        ]

    def software(self, stack: Stack) -> str:
        return "CPU only"

    def check_stack(self, stack: Stack) -> None:
        """Torch's CPU build, and nothing of CUDA, a driver or a GPU."""
        stack.unset(("cuda", "driver_min", "driver_floor", "driver_branch", "arch_list"))
        gpu = (stack.cudnn, stack.gpu_sm, stack.rocm, stack.gpu_gfx)
        if stack.build != BUILD or any(value is not None for value in gpu):
            raise BadRequest(f"a CPU stack has build {BUILD} and no cuDNN, ROCm or GPU", hint="regenerate the stack")


class CpuResolution:
    """The request's resolution on this platform, its inputs checked (its half's `start`)."""

    option = "platform"
    rank_words = RANK_WORDS

    def __init__(self, kb: KnowledgeBase, request: Request, os_info: OsInfo, cpu_arch: CpuArchFacts) -> None:
        self.kb = kb
        self.request = request
        self.os_info = os_info
        self.cpu_arch = cpu_arch

    def builds(self, torch: TorchRelease) -> tuple[tuple[str, ...], str]:
        return (BUILD,), ""

    def forward_compat(self, build: str) -> ForwardCompat | None:
        return None  # no compatibility package for newer builds on older drivers

    def why_not(self, torch: TorchRelease, build: str) -> tuple[str, str] | None:
        if self.request.purpose == "image" and "image" in self.os_info.roles and self.os_info.image is None:
            return "image", f"the knowledge base names no image of {self.os_info.name}"
        return None

    def rank(self, c: Candidate) -> tuple[Any, ...]:
        return self.request.torch is not None or fit_for_default(c.torch, c.build), V(c.torch.version)

    def stack(self, best: Candidate, survivors: list[Candidate], rejected: tuple[Rejected, ...]) -> Stack:
        torch, python, os_info = best.torch, best.python, self.os_info
        source = os_info.python[python]
        return Stack(
            torch=torch.version,
            torchvision=torch.torchvision,
            torchaudio=torch.torchaudio,
            platform="cpu",
            build=BUILD,
            cuda=NONE,
            cudnn=None,
            python=python,
            python_source=source,
            os=os_info.name,
            base_images=base_images(os_info),
            index_url=self.kb.index_url(BUILD),
            numpy=numpy_requirement(torch.version),
            driver_min=NONE,
            driver_floor=NONE,
            driver_branch=NONE,
            gpu_sm=None,
            arch_list=NONE,
            base_image_eol=False,
            reasons={
                "torch": self._torch_reason(best),
                "build": "torch's CPU build: no GPU software, from its own wheel index",
                "python": f"Python {python} via {source.via}: {source.note}",
                "os": f"{os_info.name}" + (" (default)" if self.request.os is None else " (requested)"),
            },
            rejected=rejected,
            warnings=tuple(self._warnings(best)),
            cpu_arch=self.cpu_arch.name,
        )

    def refusal_line(self, constraint: str, refused: list[Refused], flag: str) -> str | None:
        return None

    def hints(self) -> list[str]:
        return []

    def _torch_reason(self, best: Candidate) -> str:
        constraints = ", ".join(f"{k} {v}" for k, v in self.request.given().items()) or "no constraints"
        settled = self.request.torch is None and fit_for_default(best.torch, best.build)
        return f"{'newest settled release' if settled else 'newest release'} that satisfies {constraints}"

    def _warnings(self, best: Candidate) -> list[str]:
        torch, python, os_info = best.torch, best.python, self.os_info
        out = [
            f"unconfirmed fact: torch {torch.version} {item.replace(':', ' ')} ({torch.provenance.source})"
            for item in torch.provenance.unconfirmed
            if item in (f"build:{BUILD}", f"python:{python}") or ":" not in item
        ]
        if torch.torchvision is None:
            out.append(f"torchvision has no release for torch {torch.version} yet: the stack pins torch without it")
        if self.request.torch is None and not fit_for_default(torch, BUILD):
            out.append(
                f"torch {torch.version} is not settled (unconfirmed builds or no torchvision), but nothing else fits"
            )
        if os_info.python[python].via == "deadsnakes":
            out.append(f"Python {python} on {os_info.name} comes from the deadsnakes PPA, a third-party repository")
        return out
