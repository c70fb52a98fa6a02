"""The Stack: a fully pinned, matched set of versions, with the reasons for each choice.

It is what `resolve` prints with --json (schema "gpuenv.stack/1"), what `build-image` and
`provision` render from, and what `--stack FILE` reads back, so a stack resolved once is reused
exactly.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from gpuenv import schema, validate
from gpuenv.errors import BadRequest

SCHEMA = "gpuenv.stack/1"
CPU_BUILD = "cpu"  # torch's CPU-only wheels (2.13.0+cpu): no CUDA, no driver
ROCM_BUILD_PREFIX = "rocm"  # torch's ROCm wheels: "rocm6.4" (2.9.1+rocm6.4)
AMDGPU_BRANCH_PREFIX = "amdgpu-"  # a ROCm stack's driver_branch: AMD's amdgpu repository of its release
NONE = "none"  # the CUDA, driver and arch fields of a CPU stack; the CUDA and NVIDIA driver fields of a ROCm stack
_ARCH_LIST = re.compile(r"\d{1,2}\.\d(\+PTX)?(;\d{1,2}\.\d(\+PTX)?)*", re.ASCII)
_GFX_LIST = re.compile(r"gfx[0-9a-f]{3,4}(;gfx[0-9a-f]{3,4})*", re.ASCII)  # PYTORCH_ROCM_ARCH: "gfx90a;gfx942"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)


@dataclass(frozen=True)
class PythonSource:
    """How an OS provides a Python: its own package, a distro extra, deadsnakes, AppStream."""

    via: str
    packages: tuple[str, ...]
    note: str


@dataclass(frozen=True)
class Rejected:
    choice: str
    why: str


@dataclass(frozen=True)
class Stack:
    torch: str
    torchvision: str | None
    torchaudio: str | None
    cuda: str  # full toolkit version, "11.7.1"; NONE for CPU and ROCm stacks
    cuda_build: str  # torch's wheel build: "cu117", "cpu" or "rocm6.4"
    cudnn: str | None
    python: str  # "3.10"
    python_source: PythonSource
    os: str
    base_images: dict[str, str]  # by variant; empty for a host-only OS
    index_url: str
    numpy: str  # a requirement the torch version works with, e.g. "numpy<2"
    driver_min: str  # the toolkit's bundled driver: runs the stack with no caveat
    driver_floor: str  # lowest driver that runs it through minor-version compatibility
    driver_branch: str  # recommended branch to install, e.g. "R580"
    gpu_sm: str | None  # compute capability the stack was resolved for, "9.0"
    arch_list: str  # TORCH_CUDA_ARCH_LIST ("7.0;7.5;8.0") or, on ROCm, PYTORCH_ROCM_ARCH ("gfx90a;gfx942")
    base_image_eol: bool
    reasons: dict[str, str] = field(default_factory=dict)
    rejected: tuple[Rejected, ...] = ()
    warnings: tuple[str, ...] = ()
    rocm: str | None = None  # the ROCm release of a ROCm stack ("6.4"); None for CUDA and CPU stacks
    gpu_gfx: str | None = None  # the AMD GPU architecture a ROCm stack was resolved for, "gfx942"
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rejected"] = [asdict(r) for r in self.rejected]
        data["warnings"] = list(self.warnings)
        data["python_source"]["packages"] = list(self.python_source.packages)
        return {"schema": self.schema, **{k: v for k, v in data.items() if k != "schema"}}

    def requirements(self) -> list[str]:
        """pip requirement lines for the stack (torch, torchvision, torchaudio, numpy), pinned."""
        lines = [f"--index-url {self.index_url}", f"torch=={self.torch}"]
        if self.torchvision:
            lines.append(f"torchvision=={self.torchvision}")
        if self.torchaudio:
            lines.append(f"torchaudio=={self.torchaudio}")
        lines.append(self.numpy)
        return lines

    @property
    def cpu_only(self) -> bool:
        """A CPU stack: torch's +cpu wheels, nothing of CUDA or the driver."""
        return self.cuda_build == CPU_BUILD

    @property
    def platform(self) -> str:
        """ "cuda", "rocm" or "cpu": which GPU software the stack's torch build runs on."""
        if self.rocm is not None:
            return "rocm"
        return "cpu" if self.cpu_only else "cuda"

    def validate(self) -> Stack:
        """Every value re-checked before it reaches a template, a shell or Ansible; BadRequest if one is off."""
        self._check_platform_fields()
        for name in ("torch", "python") if self.platform != "cuda" else ("torch", "cuda", "python"):
            validate.version(getattr(self, name), f"stack {name}")
        for name in ("torchvision", "torchaudio", "cudnn", "gpu_sm", "rocm"):
            if getattr(self, name) is not None:
                validate.version(getattr(self, name), f"stack {name}")
        for name in ("driver_min", "driver_floor") if self.platform == "cuda" else ():
            validate.driver(getattr(self, name))
        validate.url(self.index_url, "stack index_url")
        validate.pip_requirement(self.numpy)
        for name, value in (("cuda_build", self.cuda_build), ("os", self.os), ("driver_branch", self.driver_branch)):
            if not _NAME.fullmatch(value):
                raise BadRequest(f"stack {name} {value!r} is invalid", hint="regenerate the stack")
        if self.schema != SCHEMA:
            raise BadRequest(f"stack schema {self.schema!r} is not {SCHEMA!r}", hint="regenerate the stack")
        if self.platform == "cuda" and not _ARCH_LIST.fullmatch(self.arch_list):
            raise BadRequest(f"stack arch_list {self.arch_list!r} is invalid", hint="e.g. 8.0;8.6;9.0")
        if self.platform == "rocm" and not _GFX_LIST.fullmatch(self.arch_list):
            raise BadRequest(f"stack arch_list {self.arch_list!r} is invalid", hint="e.g. gfx90a;gfx942")
        for package in self.python_source.packages:
            validate.pip_requirement(package)  # Debian and RPM package names fit the same grammar
        for ref in self.base_images.values():
            validate.image_ref(ref, "stack base image")
        return self

    def _check_platform_fields(self) -> None:
        """A CPU stack has nothing of CUDA or a driver; a ROCm stack nothing of CUDA or the NVIDIA driver."""
        if self.platform == "cpu":
            unused: tuple[str, ...] = ("cuda", "driver_min", "driver_floor", "driver_branch", "arch_list")
        elif self.platform == "rocm":
            unused = ("cuda", "driver_min", "driver_floor")
            release = str(self.rocm)
            if (
                self.cuda_build != ROCM_BUILD_PREFIX + release
                or self.driver_branch != AMDGPU_BRANCH_PREFIX + release
                or self.cudnn is not None
                or self.gpu_sm
            ):
                raise BadRequest(
                    f"a ROCm {release} stack has cuda_build {ROCM_BUILD_PREFIX}{release}, driver_branch"
                    f" {AMDGPU_BRANCH_PREFIX}{release}, no cuDNN and no gpu_sm",
                    hint="regenerate the stack",
                )
        else:
            unused = ()
            if self.gpu_gfx is not None:
                raise BadRequest("a CUDA stack has no gpu_gfx", hint="regenerate the stack")
        if any(getattr(self, name) != NONE for name in unused):
            raise BadRequest(
                f"a {self.platform.upper()} stack has {NONE!r} for {', '.join(unused)}", hint="regenerate the stack"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Stack:
        if data.get("schema") != SCHEMA:
            raise BadRequest(
                f"not a gpuenv stack (schema {data.get('schema')!r}, expected {SCHEMA!r})",
                hint="write one with: gpuenv resolve ... --json > stack.json",
            )
        names = {f.name for f in fields(cls)}
        missing = sorted(n for n in names if n not in data and n not in _OPTIONAL)
        if missing:
            raise BadRequest(f"stack file lacks {', '.join(missing)}", hint="regenerate it with gpuenv resolve --json")
        values = {k: v for k, v in data.items() if k in names}
        src = data["python_source"]
        values["python_source"] = PythonSource(src["via"], tuple(src["packages"]), src["note"])
        values["rejected"] = tuple(Rejected(**r) for r in data.get("rejected", []))
        values["warnings"] = tuple(data.get("warnings", []))
        return cls(**values)


_OPTIONAL = ("reasons", "rejected", "warnings", "rocm", "gpu_gfx")  # stack files written before ROCm lack the last two


def load_stack(path: Path) -> Stack:
    """Read a stack written by `gpuenv resolve --json`; values are re-validated before use."""
    hint = "give a file written by gpuenv resolve --json"
    data = schema.load(path, "stack file", "stack", hint=hint)
    try:
        stack = Stack.from_dict(data)
    except (KeyError, TypeError) as exc:
        raise BadRequest(f"stack file {path} is malformed: {exc}", hint=hint) from exc
    return stack.validate()
