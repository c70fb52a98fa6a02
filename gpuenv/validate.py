"""Strict grammars for every value a user hands in.

Each validator returns the value (normalised) or raises BadRequest with a one-line message and a
hint. Nothing reaches a resolver, a template, a shell or Ansible before passing through here.
Patterns use re.ASCII so that look-alike digits (fullwidth '９') are rejected.
"""

from __future__ import annotations

import ipaddress
import math
import re
from pathlib import Path

from gpuenv.errors import BadRequest

MAX_LEN = 200


class _Pattern:
    """A regular expression compiled at its first use (by re's own cache): every command imports
    this module, and compiling its patterns at import cost each start a millisecond."""

    __slots__ = ("flags", "source")

    def __init__(self, source: str, flags: int) -> None:
        self.source = source
        self.flags = flags

    def fullmatch(self, value: str) -> re.Match[str] | None:
        return re.fullmatch(self.source, value, self.flags)


_VERSION = _Pattern(r"\d{1,4}(\.\d{1,4}){0,3}", re.ASCII)
_TORCH_VERSION = _Pattern(r"\d{1,4}(\.\d{1,4}){0,3}(\+[a-z]{2,8}\d{0,4}(\.\d{1,2}){0,2})?", re.ASCII)  # 2.4.0+cu121
_DRIVER = _Pattern(r"\d{3}(\.\d{1,3}){0,2}", re.ASCII)
_DRIVER_BRANCH = _Pattern(r"[Rr]?(\d{3})", re.ASCII)
_OS = _Pattern(r"[a-z]{2,20}\d{1,2}(\.\d{2})?", re.ASCII)
_SM = _Pattern(r"sm_?(\d)(\d{1,2})", re.ASCII | re.IGNORECASE)
_COMPUTE_CAP = _Pattern(r"(\d{1,2})\.(\d)", re.ASCII)  # as nvidia-smi --query-gpu=compute_cap prints it: 9.0
_GPU_NAME = _Pattern(r"[A-Za-z0-9][A-Za-z0-9 ./_-]{0,39}", re.ASCII)  # "/": amd-smi prints "MI250X/MI250"
_INSTANCE_TYPE = _Pattern(r"[A-Za-z0-9][A-Za-z0-9._:/+-]{0,63}", re.ASCII)
_PERCENT = _Pattern(r"(\d{1,2}(\.\d{1,3})?)\s*%?", re.ASCII)
_HOSTNAME = _Pattern(
    r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*",
    re.ASCII,
)
# One Slurm node name: no hostlist syntax (',' and whitespace separate names, '[1-4]' is a range),
# no '=' (scontrol would read a second field), no '/', no control characters.
_SLURM_NODE = _Pattern(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", re.ASCII)
SLURM_KEYWORDS = ("all",)  # scontrol's name for every node
_IPV6 = _Pattern(r"[0-9A-Fa-f:]{2,39}", re.ASCII)
_USER = _Pattern(r"[a-z_][a-z0-9_-]{0,31}", re.ASCII)
_REF_SEP = r"(\.|_{1,2}|-+)"  # Docker's separators: one dot, one or two underscores, dashes ('..' is none)
_IMAGE_REF = _Pattern(
    rf"([a-z0-9]+({_REF_SEP}[a-z0-9]+)*(:\d{{1,5}})?/)?"  # optional registry[:port]/
    rf"[a-z0-9]+({_REF_SEP}[a-z0-9]+)*(/[a-z0-9]+({_REF_SEP}[a-z0-9]+)*)*"  # path
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"  # :tag
    r"(@sha256:[a-f0-9]{64})?",  # @digest
    re.ASCII,
)
_PIP_REQ = _Pattern(
    r"[A-Za-z0-9]([A-Za-z0-9._-]{0,99})"  # project name
    r"(\[[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*\])?"  # extras
    r"((==|>=|<=|~=|!=|<|>|===)[A-Za-z0-9.*+!]{1,40}"
    r"(,(==|>=|<=|~=|!=|<|>)[A-Za-z0-9.*+!]{1,40})*)?",
    re.ASCII,
)
_BUILD_ARG = _Pattern(r"[A-Za-z_][A-Za-z0-9_]{0,63}=[A-Za-z0-9_.,:/@+=-]{0,200}", re.ASCII)
_URL = _Pattern(r"https?://[A-Za-z0-9.-]+(:\d{1,5})?(/[A-Za-z0-9._~%/+-]*)?", re.ASCII)


def _basic(value: str, what: str) -> str:
    if not value or not value.strip():
        raise BadRequest(f"{what} is empty", hint=f"give a value for {what}")
    if len(value) > MAX_LEN:
        raise BadRequest(f"{what} is too long ({len(value)} characters)", hint="check the value")
    if not (value.isascii() and value.isprintable()):  # printable ASCII and the space only
        raise BadRequest(
            f"{what} {value[:40]!r} holds characters outside printable ASCII",
            hint="type the value in plain ASCII, without newlines or control characters",
        )
    return value


def _match(pattern: _Pattern, value: str, what: str, hint: str) -> str:
    _basic(value, what)
    if not pattern.fullmatch(value):
        raise BadRequest(f"invalid {what}: {value[:60]!r}", hint=hint)
    return value


def version(value: str, what: str = "version") -> str:
    """A dotted version: digits and dots only ('11.7', '2.0.1')."""
    return _match(_VERSION, value, what, "a version is digits and dots, e.g. 11.7 or 2.0.1")


TORCH_VERSIONS = "e.g. 2.4, 2.4.0, 2.4.0+cu121, 2.6.0+rocm6.2.4 or 2.5.1+cpu"


def torch_version(value: str) -> str:
    """A torch version, optionally with the local version of a build ('2.4.0+cu121', '2.6.0+rocm6.2.4', '2.5.1+cpu');
    which platform spells the build so, gpuenv.platforms.spelling reads."""
    return _match(_TORCH_VERSION, value, "torch version", TORCH_VERSIONS)


def os_name(value: str) -> str:
    """An OS name such as ubuntu22.04 or rockylinux9 (checked against the knowledge base later)."""
    return _match(_OS, value.lower(), "OS", "e.g. ubuntu22.04, ubuntu24.04, debian12, rockylinux9")


def driver(value: str) -> str:
    """An NVIDIA driver version ('535.104.05', '470') or 'auto'."""
    if value == "auto":
        return value
    return _match(_DRIVER, value, "driver version", "e.g. 535.104.05, 580 or auto")


def driver_branch(value: str, what: str = "driver branch") -> str:
    """A driver branch: three digits, optionally with NVIDIA's R ('580', 'R580'); returns the digits."""
    match = _DRIVER_BRANCH.fullmatch(_basic(value, what))
    if not match:
        raise BadRequest(f"invalid {what}: {value[:60]!r}", hint="a branch is three digits, e.g. 580 or R580")
    return match.group(1)


def gpu(value: str) -> str:
    """A GPU model name ('H100') or a compute capability ('sm_90', 'sm_120', or '9.0' as nvidia-smi prints it)."""
    value = _basic(value, "GPU")
    sm = _SM.fullmatch(value) or _COMPUTE_CAP.fullmatch(value)
    if sm:
        return f"sm_{sm.group(1)}{sm.group(2)}"
    return _match(_GPU_NAME, value, "GPU", "a model name such as H100, A100, L4, or sm_90 (or 9.0)")


RESERVED_HOSTS = ("all", "ungrouped")  # Ansible's own group names, not hosts


def hostname(value: str) -> str:
    """A DNS name or an IPv4/IPv6 address (nothing else reaches an inventory)."""
    value = _basic(value, "host")
    if value in RESERVED_HOSTS:
        raise BadRequest(f"invalid host: {value!r} is Ansible's name for a group", hint="name the hosts themselves")
    if _HOSTNAME.fullmatch(value) or (":" in value and _IPV6.fullmatch(value) and _is_ipv6(value)):
        return value
    raise BadRequest(
        f"invalid host: {value[:60]!r}", hint="a host is a DNS name or an IP address, e.g. gpu01 or 10.0.0.5"
    )


def slurm_node(value: str, what: str = "--node") -> str:
    """One Slurm node name, as scontrol takes it: never a list, a range or the keyword ALL."""
    hint = "one node name as slurm.conf's NodeName gives it, e.g. gpu01 (no lists, ranges or ALL)"
    _basic(value, what)
    if value.lower() in SLURM_KEYWORDS:
        raise BadRequest(f"{what} {value!r} is Slurm's name for every node, not one node", hint=hint)
    if not _SLURM_NODE.fullmatch(value):
        raise BadRequest(f"{what} {value[:60]!r} is not one Slurm node name", hint=hint)
    return value


def slurm_partition(value: str, what: str = "--partition") -> str:
    """One Slurm partition name, as srun and sinfo take it (never a list)."""
    _basic(value, what)
    if not _SLURM_NODE.fullmatch(value):
        raise BadRequest(f"{what} {value[:60]!r} is not one Slurm partition name", hint="e.g. gpu (sinfo lists them)")
    return value


def _is_ipv6(value: str) -> bool:
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return True


def user(value: str) -> str:
    return _match(_USER, value, "user", "a POSIX user name, e.g. ubuntu or root")


def image_ref(value: str, what: str = "image reference") -> str:
    """A Docker image reference: [registry[:port]/]path[:tag][@sha256:digest]."""
    return _match(_IMAGE_REF, value, what, "e.g. myteam/torch:2.0.1-cu117 or registry:5000/img@sha256:<64 hex>")


def pip_requirement(value: str) -> str:
    """One pip requirement: name[extras] with optional version specifiers, no spaces, URLs or markers."""
    return _match(_PIP_REQ, value, "pip requirement", "e.g. transformers==4.44.2 or 'einops>=0.8'")


def build_arg(value: str) -> str:
    """A Docker build argument NAME=VALUE with a plain value (no quotes, $, backticks or spaces)."""
    return _match(_BUILD_ARG, value, "build argument", "NAME=VALUE, the value made of letters, digits and ._-:/@+,=")


def url(value: str, what: str = "URL") -> str:
    return _match(_URL, value, what, "an http(s) URL, e.g. https://mirror.example.com/whl/cu117")


def existing_dir(value: str, what: str = "directory") -> Path:
    _basic(value, what)
    path = Path(value)
    if not path.is_dir():
        raise BadRequest(f"{what} {value!r} is not a directory", hint="give the path of an existing directory")
    return path


def existing_file(value: str, what: str = "file") -> Path:
    _basic(value, what)
    path = Path(path_length(value, what))
    if not path.is_file():
        problem = "is not a regular file" if path.exists() else "does not exist"
        raise BadRequest(f"{what} {value!r} {problem}", hint="give the path of an existing file")
    return path


def private_file(value: str, what: str = "file") -> Path:
    """An existing file that only its owner can read or write (mode 0600 or stricter): it holds a secret."""
    path = existing_file(value, what)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise BadRequest(
            f"{what} {value!r} is readable or writable by others (mode {mode:04o})",
            hint=f"it holds a secret: chmod 600 {value}",
        )
    return path


_SAFE_PATH = _Pattern(r"[A-Za-z0-9_./~+@-]{1,200}", re.ASCII)


def port(value: str | int, what: str = "port") -> int:
    """A TCP port, 1-65535."""
    text = str(value).strip()
    if not re.fullmatch(r"\d{1,5}", text, re.ASCII) or not 1 <= int(text) <= 65535:
        raise BadRequest(f"invalid {what}: {text[:20]!r}", hint="a port is a number from 1 to 65535, e.g. 22")
    return int(text)


def path_length(value: str, what: str = "path") -> str:
    """A path the OS can look up: at most 4096 bytes, each component at most 255 (else ENAMETOOLONG)."""
    if len(value.encode()) > 4096 or any(len(part.encode()) > 255 for part in value.split("/")):
        raise BadRequest(f"{what} is too long to be a file name ({len(value)} characters)", hint="check the value")
    return value


def seconds(value: float, what: str = "--timeout", *, most: float = 86400.0) -> float:
    """A finite number of seconds, from 1 to `most` (nan, inf and 1e300 are not durations)."""
    if not math.isfinite(value) or not 1 <= value <= most:
        raise BadRequest(f"invalid {what}: {value!r}", hint=f"a number of seconds from 1 to {most:g}")
    return value


def absolute_path(value: str, what: str = "path") -> str:
    """A plain absolute path without '..' (a directory on a host, such as --venv)."""
    safe_path(value, what)
    if not value.startswith("/") or ".." in value.split("/"):
        raise BadRequest(f"{what} must be an absolute path: {value[:60]!r}", hint="e.g. /opt/gpuenv/venv")
    return value


def safe_path(value: str, what: str = "path") -> str:
    """A path made of plain characters only (letters, digits and _./~+@-), safe in any shell or template."""
    return _match(_SAFE_PATH, value, what, "use a path of letters, digits and _./~+@- only")


MOST_PER_HOUR = 100000.0  # dollars per hour: anything above is a typo, not a price


def price(value: float, what: str = "--price-per-hour") -> float:
    """A price in dollars per hour: finite, above zero, at most MOST_PER_HOUR."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"invalid {what}: {value!r}", hint="a price in dollars per hour, e.g. 3.06")
    if not math.isfinite(value) or not 0 < value <= MOST_PER_HOUR:
        raise BadRequest(
            f"invalid {what}: {value!r}", hint=f"a price in dollars per hour above 0 and at most {MOST_PER_HOUR:g}"
        )
    return float(value)


def instance_type(value: str) -> str:
    """A cloud instance type or any name a fleet gives its node kind ('p4d.24xlarge', 'Standard_ND96asr_v4')."""
    return _match(_INSTANCE_TYPE, value, "instance type", "letters, digits and ._:/+- , e.g. p4d.24xlarge")


def percent(value: str, what: str = "--max-loss") -> float:
    """A share from 0 to 99.999 percent, written '5%' or '5'; returned as a fraction (0.05)."""
    value = _basic(value, what)
    found = _PERCENT.fullmatch(value.strip())
    if not found:
        raise BadRequest(f"invalid {what}: {value[:20]!r}", hint="a percentage below 100, e.g. 5%")
    return float(found.group(1)) / 100
