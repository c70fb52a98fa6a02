"""The one reader of verify reports on disk: a file to a typed report, decoded and validated in one pass.

Every reader of reports (fleet report and baselines, fleet verify, the GPU history, provision's
verdicts, the Slurm hooks) reads through here, once per file. A report of schema /1 or /2 (see
gpuenv/data/report.schema*.json) decodes into `VerifyReport`, typed as far as gpuenv's readers look;
the rest is skipped unparsed (a check's `detail` is kept as raw JSON, decoded on demand). A value of
the wrong type is refused with the place it was found (`$.host.gpus[0].index`). The summary
`fleet verify` writes beside its reports decodes into `FleetVerifySummary`.

Reports written before gpuenv wrote `null` for a figure that was not finite may hold `NaN` or
`Infinity`, which JSON has not: such a file is read again through Python's json, as gpuenv always
read it, and converted to the same types (slower, and only for those files).
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Union

import msgspec

from gpuenv.types import Device, Outcome, ReportOutcome, Status
from gpuenv.verify.model import Severity

SCHEMA_V1 = "gpuenv.verify-report/1"
SCHEMA_V2 = "gpuenv.verify-report/2"
FLEET_VERIFY_SCHEMA = "gpuenv.fleet-verify/1"  # the outcomes `fleet verify` writes beside its reports
REPORT_LIMIT = 64 << 20  # a verify report is tens of KiB; anything this big is not one
UNREADABLE = "unreadable report"  # the verdict given for a file that is not a readable report
# A file whose `schema` says it is a gpuenv report (or fleet verify summary), whatever else it holds:
# one that cannot be read is a host whose verdict is lost, not a stray file.
TOO_DEEP = "corrupt: nested too deeply to be a report"
_CLAIMS_SCHEMA = re.compile(rb'"schema"\s*:\s*"gpuenv\.(?:verify|fleet-verify)')


class FindingGpu(msgspec.Struct, frozen=True, gc=False):
    """The GPU a finding names (checks number GPUs by NVML or CUDA index)."""

    index: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None


class Finding(msgspec.Struct, frozen=True, gc=False):
    severity: Severity
    message: str = ""
    code: str | None = None  # `<check>.<rule>`; reports of schema /1 have none
    gpu: FindingGpu | None = None


class DeclaredFigure(msgspec.Struct, frozen=True, gc=False):
    """A site check's metric as it declared it (gpuenv's own figures are registered instead)."""

    unit: str
    better: Literal["higher", "lower"]
    per_gpu: bool = False


class Check(msgspec.Struct, frozen=True, gc=False):
    name: str
    status: Status
    duration_s: float = 0.0
    summary: str = ""
    metrics: dict[str, Any] = {}
    findings: tuple[Finding, ...] = ()
    detail: msgspec.Raw = msgspec.Raw(b"{}")  # read by few: decoded by detail_value()
    figures: dict[str, DeclaredFigure] = {}  # a site check's

    def plain(self) -> dict[str, Any]:
        """What gpuenv.verify.figures reads of the check: its name, metrics and declared figures."""
        plain: dict[str, Any] = {"name": self.name, "metrics": self.metrics}
        if self.figures:
            plain["figures"] = {k: msgspec.structs.asdict(v) for k, v in self.figures.items()}
        return plain

    def detail_value(self) -> Any:
        """The check's detail (signal, stderr tail, NVML snapshot ...), decoded."""
        return msgspec.json.decode(self.detail)


class HostGpu(msgspec.Struct, frozen=True, gc=False):
    index: int | None = None  # NVML's
    cuda_index: int | None = None  # as the report's process saw it
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    compute_capability: str | None = None  # NVIDIA's "9.0"
    gfx: str | None = None  # AMD's target, "gfx942"


class Host(msgspec.Struct, frozen=True, gc=False):
    hostname: str | None = None
    cpu_arch: str | None = None  # `uname -m`; None in reports written before it was named
    gpus: tuple[HostGpu, ...] = ()
    # The host's OS as the knowledge base names OSes ("ubuntu22.04") and the Python that ran verify ("3.11");
    # None in reports written before they were recorded, and in those written inside a container (not the host's)
    os: str | None = None
    python: str | None = None
    instance_type: str | None = None


class FoundStack(msgspec.Struct, frozen=True, gc=False):
    """What the stack check found, as far as readers look: the loaded driver."""

    driver: str | None = None


class Verdict(msgspec.Struct, frozen=True, gc=False):
    outcome: ReportOutcome
    certified: bool = False
    exit_code: int = 3
    summary: str = ""


class MultiNode(msgspec.Struct, frozen=True, gc=False):
    """Of a run across nodes: its job, and the localisation's rounds (open: read by the fleet report)."""

    job: str | None = None
    localisation: dict[str, Any] | None = None


class VerifyReport(msgspec.Struct, frozen=True, gc=False, tag_field="schema", tag=SCHEMA_V2):
    """A verify report, as far as gpuenv's readers look into it."""

    started: str = ""
    device: Device | None = None
    cpu_only: bool = False
    host: Host = Host()
    stack: FoundStack = FoundStack()
    checks: tuple[Check, ...] = ()
    verdict: Verdict | None = None
    multi_node: MultiNode | None = None

    @property
    def schema(self) -> str:
        return str(self.__struct_config__.tag)


class VerifyReportV1(VerifyReport, frozen=True, gc=False, tag=SCHEMA_V1):
    """Schema /1: findings without codes, no timings (the fields read are the same)."""


class SummaryRow(msgspec.Struct, frozen=True, gc=False):
    host: str  # the inventory's name
    outcome: Outcome
    report: str | None = None  # the report's path, as fleet verify wrote it
    message: str | None = None


class FleetVerifySummary(msgspec.Struct, frozen=True, gc=False, tag_field="schema", tag=FLEET_VERIFY_SCHEMA):
    """The file `fleet verify` writes beside its reports: every host's outcome."""

    hosts: tuple[SummaryRow, ...]


Document = Union[VerifyReport, VerifyReportV1, FleetVerifySummary]  # noqa: UP007 (msgspec reads it at run time)
KNOWN_SCHEMAS = frozenset((SCHEMA_V1, SCHEMA_V2, FLEET_VERIFY_SCHEMA))
_DECODER = msgspec.json.Decoder(Document)


class UnreadableReport(ValueError):
    """The bytes are no report gpuenv can read; the message says why (corrupt, not a report, malformed)."""


class ReportFile(NamedTuple):
    """One file, read once: its bytes (the GPU history keeps their hash), when it was last written, what it holds."""

    path: str
    raw: bytes
    mtime: float
    document: VerifyReport | FleetVerifySummary


@dataclass(frozen=True)
class Skipped:
    """A file set aside, and why (never an exception for what a file holds); `claimed`: its `schema`
    says it is a gpuenv report, so setting it aside loses a verdict (a reader must not call that healthy)."""

    path: str
    reason: str
    claimed: bool = False


def read(path: str | os.PathLike[str]) -> ReportFile | Skipped:
    """A report or fleet verify summary from a file, or why it was set aside: not a regular file (a FIFO
    does not block the read), unreadable, larger than REPORT_LIMIT, corrupt, not a report, malformed."""
    name = os.fspath(path)
    raw = _raw(name)
    if isinstance(raw, Skipped):
        return raw
    return parse(name, *raw)


def parse(name: str, data: bytes, mtime: float) -> ReportFile | Skipped:
    """A report already in memory (as `fleet verify` takes it from a host's answer), as `read` gives it."""
    if len(data) > REPORT_LIMIT:
        return Skipped(name, f"larger than {REPORT_LIMIT >> 20} MiB: not a report")
    try:
        return ReportFile(name, data, mtime, decode(data))
    except UnreadableReport as exc:
        return Skipped(name, str(exc), claims_report(data))


def claims_report(raw: bytes) -> bool:
    """Whether a file's `schema` says it is a gpuenv verify report or fleet verify summary."""
    return _CLAIMS_SCHEMA.search(raw) is not None


def decode(raw: bytes) -> VerifyReport | FleetVerifySummary:
    """The typed document in a file's bytes; UnreadableReport when it is none."""
    try:
        return _DECODER.decode(raw)
    except msgspec.DecodeError:  # NaN, a wrong type, not a report, corrupt: the slow path tells which
        pass
    except RecursionError:  # nested past any report's depth: no reader goes further
        raise UnreadableReport(TOO_DEEP) from None
    return _converted(_parsed(raw))


def verdict_of(path: str | os.PathLike[str]) -> tuple[ReportOutcome | str, str | None]:
    """A host's report's outcome and its verdict's summary; (UNREADABLE, None) when the file is no verify
    report or has no verdict."""
    return verdict(read(path))


def verdict(found: ReportFile | Skipped) -> tuple[ReportOutcome | str, str | None]:
    """The outcome and summary of a report already read (UNREADABLE, None when it is no verify report)."""
    if isinstance(found, Skipped) or not isinstance(found.document, VerifyReport) or found.document.verdict is None:
        return UNREADABLE, None
    return found.document.verdict.outcome, found.document.verdict.summary


def _raw(path: str) -> tuple[bytes, float] | Skipped:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO among the reports must not block the read
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return Skipped(path, "not a regular file")
            raw = os.read(fd, min(info.st_size, REPORT_LIMIT) + 1)  # the whole file, in one call
            while info.st_size < len(raw) <= REPORT_LIMIT and (more := os.read(fd, 1 << 16)):
                raw += more  # it grew since fstat
        finally:
            os.close(fd)
    except OSError as exc:
        return Skipped(path, f"unreadable: {exc.strerror or exc}")
    if len(raw) > REPORT_LIMIT:
        return Skipped(path, f"larger than {REPORT_LIMIT >> 20} MiB: not a report")
    return raw, info.st_mtime


def _parsed(raw: bytes) -> Any:
    """The JSON as Python's json reads it: NaN and Infinity as floats, as gpuenv always read reports."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise UnreadableReport(TOO_DEEP) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UnreadableReport(f"corrupt: {str(exc)[:120]}") from None


def _converted(data: Any) -> VerifyReport | FleetVerifySummary:
    if not isinstance(data, dict) or data.get("schema") not in KNOWN_SCHEMAS:
        raise UnreadableReport("not a gpuenv verify report")
    try:
        document: VerifyReport | FleetVerifySummary = msgspec.convert(_raw_details(data), Document)
    except (msgspec.ValidationError, msgspec.EncodeError, OverflowError) as exc:
        raise UnreadableReport(f"corrupt: malformed: {str(exc)[:120]}") from None
    except RecursionError:
        raise UnreadableReport(TOO_DEEP) from None
    return document


def _raw_details(data: dict[str, Any]) -> dict[str, Any]:
    """The checks' details as raw JSON, as the fast decoder keeps them (a non-finite number in them becomes null)."""
    checks = data.get("checks")
    if not isinstance(checks, list):
        return data
    kept = [
        {**c, "detail": msgspec.Raw(msgspec.json.encode(c["detail"]))} if isinstance(c, dict) and "detail" in c else c
        for c in checks
    ]
    return {**data, "checks": kept}
