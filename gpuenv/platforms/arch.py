"""A CPU architecture turned into facts once, so that nothing past this module asks which one it is.

As hpc-container-maker's building blocks turn the CPU architecture into labels in one method and
build the rest from the labels, a platform is constructed with the `CpuArchFacts` of its
architecture and reads fields of it: the wheel platform tags pip accepts for its hosts, the platform
Docker builds images for. Which builds a release publishes for it, and their GPU code, are the knowledge
base's (its torch_cpu_arch rows). Adding an architecture is a row here and the registry's entries for it.
"""

from __future__ import annotations

import platform

from gpuenv.errors import BadRequest
from gpuenv.types import CpuArch


class CpuArchFacts:
    def __init__(
        self, name: CpuArch, aliases: tuple[str, ...], wheel_platforms: tuple[str, ...], *, docker: str, tag_suffix: str
    ) -> None:
        self.name = name  # as `uname -m` and Ansible's facts say it
        self.aliases = aliases  # other spellings users bring: Debian's and Docker's
        self.wheel_platforms = wheel_platforms  # the platform tags pip accepts for a host's wheels, best first
        self.docker = docker  # the platform Docker builds and pulls images for: "linux/arm64"
        self.tag_suffix = tag_suffix  # on gpuenv's default image tag, so two architectures' images never share one

    @property
    def caveat(self) -> str:
        """The warning a stack carries when the knowledge base in use holds no wheel facts for this architecture."""
        return (
            f"the knowledge base in use has no wheel facts for {self.name}: its builds, GPU code and Pythons are "
            f"another architecture's, whether each is published for {self.name} is not checked"
        )


ARCHES: dict[CpuArch, CpuArchFacts] = {
    "x86_64": CpuArchFacts(
        "x86_64",
        ("amd64", "x64"),
        ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"),
        docker="linux/amd64",
        tag_suffix="",  # the tags gpuenv always gave
    ),
    "aarch64": CpuArchFacts(
        "aarch64",
        ("arm64",),
        ("manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64", "linux_aarch64"),
        docker="linux/arm64",
        tag_suffix="-aarch64",
    ),
}
DEFAULT_CPU_ARCH: CpuArch = "x86_64"


def cpu_arch(text: str) -> CpuArchFacts | None:
    """The architecture `text` names (its name or an alias, any case), or None."""
    key = text.strip().lower()
    return next((a for a in ARCHES.values() if key == a.name or key in a.aliases), None)


def cpu_arch_named(text: str) -> CpuArchFacts:
    """The architecture `text` names; BadRequest listing every spelling when it names none."""
    found = cpu_arch(text)
    if found is None:
        spelled = ", ".join(f"{a.name} ({', '.join(a.aliases)})" for a in ARCHES.values())
        raise BadRequest(f"unknown CPU architecture {text!r}", hint=f"known: {spelled}")
    return found


def machine() -> str:
    """This machine's CPU architecture, as `uname -m` says it ("x86_64", "aarch64"; "arm64" on macOS)."""
    return platform.machine()


def arch_name(text: str) -> str:
    """gpuenv's name for a CPU architecture ("arm64" -> "aarch64"), else the text as given."""
    found = cpu_arch(text)
    return found.name if found else text
