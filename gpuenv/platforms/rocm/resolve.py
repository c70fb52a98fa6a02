"""ROCm's resolve half: torch's +rocm wheels for AMD GPUs, from the same Request as every platform's. Pure.

A request is for ROCm when it gives --rocm (6.4, 6.2.4 or rocm6.4), a torch version with a +rocm local
tag, or an AMD --gpu (MI300X, or an LLVM target such as gfx942). A build is ruled out by an OS AMD does
not support the release on, a missing rocm/dev image for an image, a GPU older releases do not know or
whose code the build does not carry. Usable builds rank by: fit for a default, the newest torch, a
confirmed build, the newest ROCm.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from gpuenv.errors import BadRequest
from gpuenv.kb import AmdGpu, ForwardCompat, KnowledgeBase, OsInfo, Provenance, RocmRelease, TorchRelease, V
from gpuenv.platforms.arch import CpuArchFacts
from gpuenv.platforms.base import Claim, Row, unknown_gpu
from gpuenv.platforms.node import Unsupported
from gpuenv.platforms.rocm.oses import releases_named, rocm_os_row, rocm_os_warning
from gpuenv.resolve.candidates import Candidate, Refused
from gpuenv.resolve.reasons import runs_merged
from gpuenv.resolve.request import Request, numpy_requirement, torch_matches
from gpuenv.stack import NONE, Rejected, Stack

# Patterns as text, compiled at their first use (re's cache): a command that never reads them pays nothing.
_GFX = r"gfx[0-9a-f]{3,4}"
_GFX_LIST = r"gfx[0-9a-f]{3,4}(;gfx[0-9a-f]{3,4})*"  # PYTORCH_ROCM_ARCH: "gfx90a;gfx942"
_BUILD = r"rocm(\d{1,2}(\.\d{1,2}){1,2})"  # torch's build names: rocm6.4, rocm6.2.4
_RELEASE = r"(?i:rocm)?(\d{1,2}(\.\d{1,2}){0,2})"
AMDGPU_BRANCH_PREFIX = "amdgpu-"  # a ROCm stack's driver_branch: AMD's amdgpu repository of its release
SPELLINGS = "6.4, 6.2.4 or rocm6.4 (the wheel build)"
RANK_WORDS = (
    "not settled: give --torch to use it",
    "an older release",
    "its build is unconfirmed",
    "an older ROCm than {best}",
)


def amd_target(kb: KnowledgeBase, gpu: str) -> AmdGpu | None:
    """The AMD GPU --gpu names: a model (MI300X) or an LLVM target (gfx942, which the KB's GPUs must know)."""
    found = kb.find_amd_gpu(gpu)
    if found is not None or not re.fullmatch(_GFX, gpu.lower(), re.ASCII):
        return found
    same = [g for g in kb.amd_gpus if g.gfx == gpu.lower()]
    if not same:
        return None
    floors = [V(g.min_rocm) for g in same if g.min_rocm is not None]
    least = str(min(floors)) if len(floors) == len(same) else None
    return AmdGpu(gpu.lower(), gpu.lower(), (), (), least, Provenance("amd-gpu-specs", same[0].provenance.checked))


class RocmResolve:
    option = "rocm"
    spellings: str = SPELLINGS
    builds_spelled: str = "rocm6.4, rocm6.2.4, … (rocm and the release)"

    def __init__(self, cpu_arch: CpuArchFacts) -> None:
        self.cpu_arch = cpu_arch

    def claims(self, kb: KnowledgeBase, request: Request) -> Claim | None:
        if request.rocm:
            return Claim(f"--rocm {request.rocm}")
        target = amd_target(kb, request.gpu) if request.gpu else None
        if target is None:
            return None
        return Claim(
            f"--gpu {request.gpu}", f"--gpu {request.gpu} is an AMD GPU ({target.gfx}): it runs torch's ROCm builds"
        )

    def owns(self, build: str) -> bool:
        return bool(re.fullmatch(_BUILD, build, re.ASCII))

    def asks(self, build: str) -> dict[str, str]:
        return {"rocm": build}

    def release(self, text: str) -> str | None:
        found = re.fullmatch(_RELEASE, text, re.ASCII)
        return found.group(1) if found else None

    def pin(self, kb: KnowledgeBase, request: Request, version: str, build: str) -> Request | None:
        """--torch 2.6.0+rocm6.2.4 is --torch 2.6.0 --rocm 6.2.4 (refused if --rocm says otherwise)."""
        if not self.owns(build):
            return None
        row = kb.rocm_by_build.get(build)
        if row is None:
            known = ", ".join(r.build for r in kb.rocm) or "none"
            raise BadRequest(
                f"unknown ROCm build {build} in torch version {request.torch}", hint=f"known builds: {known}"
            )
        if request.rocm and row not in releases_named(kb, request.rocm):
            raise BadRequest(
                f"--torch {request.torch} names build {build}, but --rocm asks for {request.rocm}",
                hint=f"drop --rocm, or ask for --torch {version}",
            )
        return replace(request, torch=version, rocm=row.version)

    def start(self, kb: KnowledgeBase, request: Request, os_info: OsInfo) -> RocmResolution:
        amd = amd_target(kb, request.gpu) if request.gpu else None
        if request.gpu and amd is None:
            raise unknown_gpu(kb, request.gpu, f"--gpu {request.gpu} is not an AMD GPU the knowledge base knows")
        if request.driver:
            reason = f"--driver {request.driver} is an NVIDIA driver version; a ROCm stack runs on AMD's amdgpu driver"
            raise Unsupported(reason, "drop --driver").refuse()
        if request.rocm and not releases_named(kb, request.rocm):
            known = ", ".join(r.version for r in kb.rocm)
            raise BadRequest(f"unknown ROCm version {request.rocm}", hint=f"known: {known}; spelled {SPELLINGS}")
        return RocmResolution(kb, request, os_info, amd, self.cpu_arch)

    def rows(self, stack: Stack) -> list[Row]:
        return [
            ("ROCm build", stack.build, "build"),
            ("ROCm", str(stack.rocm), "rocm"),
            ("Python", f"{stack.python} ({stack.python_source.via})", "python"),
            ("OS", stack.os, "os"),
            ("wheel index", stack.index_url, None),
            ("driver", stack.driver_branch, "driver_branch"),
            ("PYTORCH_ROCM_ARCH", stack.arch_list, "arch_list"),
        ]

    def software(self, stack: Stack) -> str:
        return f"ROCm {stack.rocm}"

    def check_stack(self, stack: Stack) -> None:
        """Its ROCm release in the build and the amdgpu branch, a PYTORCH_ROCM_ARCH, nothing of CUDA's."""
        stack.unset(("cuda", "driver_min", "driver_floor"))
        release = str(stack.rocm)
        if (
            stack.build != f"rocm{release}"
            or stack.driver_branch != AMDGPU_BRANCH_PREFIX + release
            or stack.cudnn is not None
            or stack.gpu_sm
        ):
            raise BadRequest(
                f"a ROCm {release} stack has build rocm{release}, driver_branch {AMDGPU_BRANCH_PREFIX}{release},"
                " no cuDNN and no gpu_sm",
                hint="regenerate the stack",
            )
        if not re.fullmatch(_GFX_LIST, stack.arch_list, re.ASCII):
            raise BadRequest(f"stack arch_list {stack.arch_list!r} is invalid", hint="e.g. gfx90a;gfx942")


class RocmResolution:
    """The request's resolution on this platform, its inputs checked (its half's `start`)."""

    option = "rocm"
    rank_words = RANK_WORDS

    def __init__(
        self, kb: KnowledgeBase, request: Request, os_info: OsInfo, amd: AmdGpu | None, cpu_arch: CpuArchFacts
    ) -> None:
        self.kb = kb
        self.request = request
        self.os_info = os_info
        self.amd = amd
        self.cpu_arch = cpu_arch

    def builds(self, torch: TorchRelease) -> tuple[tuple[str, ...], str]:
        kb = self.kb
        wanted = releases_named(kb, self.request.rocm) if self.request.rocm else tuple(kb.rocm)
        made = kb.rocm_builds(torch.version)
        usable = [kb.rocm_by_build[b] for b in (made.arch if made else ())]
        why = f"built for {', '.join(r.build for r in usable)}" if usable else "no ROCm build known"
        return tuple(r.build for r in usable if r in wanted), why

    def forward_compat(self, build: str) -> ForwardCompat | None:
        return None  # no compatibility package for newer builds on older drivers

    def why_not(self, torch: TorchRelease, build: str) -> tuple[str, str] | None:
        rocm, request, os_info, amd = self.kb.rocm_by_build[build], self.request, self.os_info, self.amd
        if rocm_os_row(rocm, os_info) is None:
            return "os", f"AMD supports ROCm {rocm.version} on {', '.join(rocm.os)}, not {os_info.name}"
        if request.purpose == "image" and "image" in os_info.roles and os_info.name not in rocm.images:
            return "os", f"no rocm/dev image of ROCm {rocm.release} for {os_info.name}"
        if amd is not None and amd.min_rocm is not None and V(rocm.version) < V(amd.min_rocm):
            return "gpu", f"{amd.name} ({amd.gfx}) needs ROCm ≥ {amd.min_rocm}, and {rocm.build} is ROCm {rocm.version}"
        code = self._code(torch, build)
        if amd is not None and amd.gfx not in code:
            return "gpu", f"{rocm.build}'s GPU code is {';'.join(code)}: no kernels for {amd.name} ({amd.gfx})"
        return None

    def rank(self, c: Candidate) -> tuple[Any, ...]:
        """Like CUDA's ranking: fit for a default (when no --torch), newest torch, confirmed build, newest ROCm."""
        made = self.kb.rocm_builds(c.torch.version)
        confirmed = made is not None and made.build_confirmed(c.build)
        default_fit = self.request.torch is not None or (confirmed and c.torch.torchvision is not None)
        return default_fit, V(c.torch.version), confirmed, V(self.kb.rocm_by_build[c.build].version)

    def stack(self, best: Candidate, survivors: list[Candidate], rejected: tuple[Rejected, ...]) -> Stack:
        kb, torch, os_info, amd = self.kb, best.torch, self.os_info, self.amd
        rocm = kb.rocm_by_build[best.build]
        return Stack(
            torch=torch.version,
            torchvision=torch.torchvision,
            torchaudio=torch.torchaudio,
            platform="rocm",
            build=rocm.build,
            cuda=NONE,
            cudnn=None,
            python=best.python,
            python_source=os_info.python[best.python],
            os=os_info.name,
            base_images=base_images(rocm, os_info),
            index_url=kb.index_url(rocm.build),
            numpy=numpy_requirement(torch.version),
            driver_min=NONE,
            driver_floor=NONE,
            driver_branch=AMDGPU_BRANCH_PREFIX + rocm.version,
            gpu_sm=None,
            arch_list=amd.gfx if amd is not None else ";".join(self._code(torch, rocm.build)),
            base_image_eol=False,
            reasons=self._reasons(best, survivors),
            rejected=rejected,
            warnings=tuple(self._warnings(best)),
            rocm=rocm.version,
            gpu_gfx=amd.gfx if amd is not None else None,
            cpu_arch=self.cpu_arch.name,
        )

    def refusal_line(self, constraint: str, refused: list[Refused], flag: str) -> str | None:
        """The releases without the ROCm build asked for, each named ("torch 2.2.0 is built for rocm5.7")."""
        if constraint != "rocm":
            return None
        merged = runs_merged([Rejected(r.choice, r.why) for r in refused])  # torch 2.9.0–2.9.1, as CUDA's
        whys = list(
            dict.fromkeys(
                f"{r.choice} is {r.why}" if r.why.startswith("built") else f"{r.choice}: {r.why}" for r in merged
            )
        )
        more = f" (and {len(whys) - 3} more)" if len(whys) > 3 else ""
        return f"{flag}: {'; '.join(whys[:3])}{more}"

    def hints(self) -> list[str]:
        """Which ROCm builds fit the GPU, or exist for the ROCm release asked for."""
        kb, request, amd = self.kb, self.request, self.amd
        releases = [t for t in kb.torch_rocm if not request.torch or torch_matches(t.torch, request.torch)]
        tried = []
        if amd is not None:
            fits = [
                f"{t.torch}+{b}"
                for t in releases
                for b, code in t.arch.items()
                if amd.gfx in code and (amd.min_rocm is None or V(kb.rocm_by_build[b].version) >= V(amd.min_rocm))
            ]
            floor = f", ROCm ≥ {amd.min_rocm}" if amd.min_rocm else ""
            runs = f"runs torch {fits[0]} … {fits[-1]}" if fits else "runs no known torch build"
            tried.append(f"{amd.name} ({amd.gfx}{floor}) {runs}")
        for rocm in releases_named(kb, request.rocm) if request.rocm else ():
            made = [t.torch for t in kb.torch_rocm if rocm.build in t.arch]
            span = made[0] if len(made) == 1 else f"{made[0]}–{made[-1]}" if made else ""
            tried.append(f"{rocm.build} exists for torch {span}" if made else f"no torch has {rocm.build}")
        if request.os:
            tried.append("AMD's OS support per ROCm release: gpuenv matrix --rocm")
        return tried

    def _code(self, torch: TorchRelease, build: str) -> tuple[str, ...]:
        made = self.kb.rocm_builds(torch.version)
        return made.arch[build] if made else ()

    def _reasons(self, best: Candidate, survivors: list[Candidate]) -> dict[str, str]:
        torch, python, request, os_info, amd = best.torch, best.python, self.request, self.os_info, self.amd
        rocm = self.kb.rocm_by_build[best.build]
        constraints = ", ".join(f"{k} {v}" for k, v in request.given().items())
        usable = sorted({c.build for c in survivors if c.torch is torch}, key=lambda b: V(b.removeprefix("rocm")))
        served = rocm_os_row(rocm, os_info)
        reasons = {
            "torch": f"newest release with ROCm wheels that satisfies {constraints}",
            "build": f"{rocm.build} among this release's usable ROCm builds ({', '.join(usable)}); newest ROCm first",
            "rocm": (
                f"ROCm {rocm.version}: the wheels bundle its user-space libraries; images use rocm/dev-* {rocm.release}"
            ),
            "python": f"Python {python} via {os_info.python[python].via}: {os_info.python[python].note}",
            "os": f"{os_info.name}"
            + (" (default)" if request.os is None else " (requested)")
            + f"; AMD supports ROCm {rocm.version} on it"
            + ("" if served == os_info.name else f" as {served}"),
            "driver_branch": f"AMD's amdgpu driver repository of ROCm {rocm.version}",
            "arch_list": "PYTORCH_ROCM_ARCH for extensions: "
            + (f"the GPU's own target, {amd.gfx}" if amd else "every target the release's wheels carry"),
        }
        if amd is not None:
            code = ";".join(self._code(torch, rocm.build))
            reasons["gpu"] = f"{amd.name} ({amd.gfx}) runs torch {torch.version}+{rocm.build} ({code})"
        return reasons

    def _warnings(self, best: Candidate) -> list[str]:
        torch, os_info, amd = best.torch, self.os_info, self.amd
        rocm, made = self.kb.rocm_by_build[best.build], self.kb.rocm_builds(torch.version)
        assert made is not None  # a candidate's build is one of the release's ROCm builds
        out = [
            f"unconfirmed fact: torch {torch.version} ROCm {item.replace(':', ' ')} ({made.provenance.source})"
            for item in made.provenance.unconfirmed
            if item in ("builds", f"build:{rocm.build}", f"arch:{rocm.build}")
        ]
        image_facts = ("images", "release") if "image" in os_info.roles else ()
        out += [
            f"unconfirmed fact: ROCm {rocm.version} {item} ({rocm.provenance.source})"
            for item in rocm.provenance.unconfirmed
            if item == "os" or item in image_facts
        ]
        if amd is not None:
            out += [f"unconfirmed fact: {amd.name} {item}" for item in amd.provenance.unconfirmed]
        if (served_as := rocm_os_warning(rocm, os_info)) is not None:
            out.append(served_as)
        if torch.torchvision is None:
            out.append(f"torchvision has no release for torch {torch.version} yet: the stack pins torch without it")
        if self.request.torch is None and not self.rank(best)[0]:
            out.append(f"torch {torch.version}+{rocm.build} is not settled (unconfirmed build), but nothing else fits")
        if os_info.python[best.python].via == "deadsnakes":
            out.append(
                f"Python {best.python} on {os_info.name} comes from the deadsnakes PPA, a third-party repository"
            )
        return out


def base_images(rocm: RocmRelease, os_info: OsInfo) -> dict[str, str]:
    """AMD's rocm/dev-* images: the ROCm user space (with hipcc) for runtime, every ROCm library for devel."""
    if "image" not in os_info.roles or os_info.name not in rocm.images:
        return {}
    name = re.sub(r"^([a-z]+)", r"\1-", os_info.name)  # ubuntu24.04 -> ubuntu-24.04
    return {"runtime": f"rocm/dev-{name}:{rocm.release}", "devel": f"rocm/dev-{name}:{rocm.release}-complete"}


def known_build(kb: KnowledgeBase, build: str) -> bool:
    """Whether the knowledge base holds this ROCm build ("rocm6.4"): verify's stack check cross-checks only those."""
    return build in kb.rocm_by_build
