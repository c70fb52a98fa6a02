"""What a resolution is asked: the Request, and the rules every platform's resolver shares about it —
which torch releases a --torch names, and which Python an OS can give a release. Pure."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from gpuenv.kb import OsInfo, TorchRelease, V

Purpose = Literal["image", "host"]
DEFAULT_OS = "ubuntu22.04"
MIN_PYTHON = "3.10"
# Preferred ways to get Python, most preferred first: the OS's own package needs no extra repository.
PYTHON_SOURCE_RANK = {"system": 0, "distro": 1, "appstream": 1, "deadsnakes": 2}


@dataclass(frozen=True)
class Request:
    torch: str | None = None  # "2.4", "2.4.0" or "2.4.0+cu121" (the local version picks the build)
    cuda: str | None = None
    driver: str | None = None
    python: str | None = None
    gpu: str | None = None  # a model name ("H100", "MI300X") or "sm_90"
    os: str | None = None
    rocm: str | None = None  # a ROCm release ("6.4", "6.2.4"): torch's +rocm wheels instead of CUDA's
    platform: str | None = None  # "cuda", "rocm" or "cpu"; None: what the other constraints ask for (CUDA by default)
    # What the stack is for. An image needs an nvidia/cuda base image of its CUDA for its OS; a host
    # (provision) installs wheels and needs none. Not a constraint the user gives, so not in given().
    # Typed str, not Purpose: callers build a Request from given()'s dict[str, str].
    purpose: str = "host"
    # The CPU architecture of the target, as the host's facts name it; None: x86_64. Not yet a user's option.
    cpu_arch: str | None = None

    def given(self) -> dict[str, str]:
        return {
            f.name: v for f in fields(self) if f.name not in _NOT_GIVEN and (v := getattr(self, f.name)) is not None
        }


_NOT_GIVEN = ("purpose", "cpu_arch")


def torch_matches(version: str, wanted: str) -> bool:
    """'2.4' matches any 2.4.x; '2.0.1' matches exactly; '2.4.0+cu121' matches 2.4.0."""
    wanted = wanted.split("+", 1)[0]
    return version == wanted or version.startswith(wanted + ".")


def pick_python(torch: TorchRelease, os_info: OsInfo, wanted: str | None) -> str | None:
    usable = [
        v for v in torch.python if v in os_info.python and V(v) >= V(MIN_PYTHON) and v not in torch.python_experimental
    ]
    if wanted is not None:
        return wanted if wanted in usable else None
    if not usable:
        return None
    # The OS's own package first; among equals the lowest version, the one every release supports.
    return min(usable, key=lambda v: (PYTHON_SOURCE_RANK.get(os_info.python[v].via, 9), V(v)))


def python_problem(torch: TorchRelease, os_info: OsInfo, wanted: str | None) -> str:
    span = f"{torch.python[0]}–{torch.python[-1]}"
    if wanted in torch.python_experimental:
        return f"torch {torch.version}'s Python {wanted} wheels are experimental, without torchvision"
    if wanted is None:
        return f"no Python ≥ {MIN_PYTHON} that torch {torch.version} supports ({span}) is available on {os_info.name}"
    if wanted not in torch.python:
        return f"torch {torch.version} supports Python {span}, not {wanted}"
    if V(wanted) < V(MIN_PYTHON):
        return f"gpuenv stacks use Python ≥ {MIN_PYTHON}"
    return f"{os_info.name} has no known way to provide Python {wanted} (has {', '.join(os_info.python)})"


def numpy_requirement(torch: str) -> str:
    """The numpy a torch release's wheels were built against: numpy 2 from torch 2.3."""
    return "numpy<2" if V(torch) < V("2.3") else "numpy<3"
