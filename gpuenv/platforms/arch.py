"""A CPU architecture turned into facts once, so that nothing past this module asks which one it is.

As hpc-container-maker's building blocks turn the CPU architecture into labels in one method and
build the rest from the labels, a platform is constructed with the `CpuArchFacts` of its
architecture and reads fields of it: the wheel platform tags pip accepts for its hosts, whether the
knowledge base's wheel facts (which builds a release publishes, their GPU code, their Pythons) were
read for it. Adding an architecture is a row here and the registry's entries for it.
"""

from __future__ import annotations

from gpuenv.types import CpuArch


class CpuArchFacts:
    def __init__(
        self, name: CpuArch, aliases: tuple[str, ...], wheel_platforms: tuple[str, ...], *, kb_wheels: bool
    ) -> None:
        self.name = name  # as `uname -m` and Ansible's facts say it
        self.aliases = aliases  # other spellings users bring: Debian's and Docker's
        self.wheel_platforms = wheel_platforms  # the platform tags pip accepts for a host's wheels, best first
        self.kb_wheels = kb_wheels  # the knowledge base's wheel facts were read for this architecture

    @property
    def caveat(self) -> str | None:
        """The warning a stack resolved for this architecture carries, or None."""
        if self.kb_wheels:
            return None
        return (
            f"the knowledge base's wheel facts (builds, GPU code, Pythons) are x86_64's: whether each is "
            f"published for {self.name} is not checked"
        )


ARCHES: dict[CpuArch, CpuArchFacts] = {
    "x86_64": CpuArchFacts(
        "x86_64",
        ("amd64", "x64"),
        ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"),
        kb_wheels=True,
    ),
    "aarch64": CpuArchFacts(
        "aarch64",
        ("arm64",),
        ("manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64", "linux_aarch64"),
        kb_wheels=False,
    ),
}
DEFAULT_CPU_ARCH: CpuArch = "x86_64"


def cpu_arch(text: str) -> CpuArchFacts | None:
    """The architecture `text` names (its name or an alias, any case), or None."""
    key = text.strip().lower()
    return next((a for a in ARCHES.values() if key == a.name or key in a.aliases), None)
