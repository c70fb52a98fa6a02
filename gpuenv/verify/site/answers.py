"""What a site check answers, as a CheckResult (pure): a JSON object or a gpuenv.sitecheck.Result,
checked against gpuenv/data/schemas/site-result.schema.json, or a program's Nagios exit code.

Its findings' codes go under the check's name (`site.<name>.<code>`), so none can pose as gpuenv's;
the GPUs it names by NVML index become the report's GPU references (CUDA index, UUID, bus id), and
each metric is declared with its unit and direction in the result's `figures`. What cannot be read
is `error` (with the program's stderr tail); a program killed by a signal is `crash`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpuenv import schema
from gpuenv.sitecheck import Result
from gpuenv.verify.facts import GpuInfo
from gpuenv.verify.model import CheckResult, Finding, GpuRef, died, summarize

NAGIOS = ("pass", "warn", "fail", "error")  # exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN
NAGIOS_WORDS = ("OK", "WARNING", "CRITICAL", "UNKNOWN")
OUTPUT_KEPT = 4000  # characters of a program's plain output kept in the report


class Unreadable(ValueError):
    """The answer cannot be taken: it breaks the schema, or names a GPU the run does not check."""


def from_program(
    name: str, origin: str, *, returncode: int, stdout: str, stderr_tail: str, gpus: tuple[GpuInfo, ...]
) -> CheckResult:
    """A program's result: a signal is a crash; a JSON object on stdout is its answer (its exit
    code must be 0 or its status's Nagios code); otherwise the exit code, 0-3, by the Nagios
    convention, with the first line of output as the summary. Anything else is an error."""
    if returncode < 0:
        result = died(name, returncode, 0.0, stderr_tail)
        result.detail["origin"] = origin
        return result
    text = stdout.strip()
    if text.startswith("{"):
        return _json_answer(name, origin, text, returncode, stderr_tail, gpus)
    detail = {"origin": origin, "exit_code": returncode, "output": text[:OUTPUT_KEPT], "stderr_tail": stderr_tail}
    if not 0 <= returncode < len(NAGIOS):
        summary = f"exited {returncode}, not a Nagios code (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)"
        return CheckResult(name, "error", summary=f"{summary}; {_tail(stderr_tail)}", detail=detail)
    first = text.splitlines()[0].partition("|")[0].strip() if text else ""  # a Nagios line's perfdata follows |
    summary = first[:300] or f"exit {returncode} ({NAGIOS_WORDS[returncode]})"
    return CheckResult(name, NAGIOS[returncode], summary=summary, detail=detail)  # type: ignore[arg-type]


def _json_answer(
    name: str, origin: str, text: str, returncode: int, stderr_tail: str, gpus: tuple[GpuInfo, ...]
) -> CheckResult:
    detail = {"origin": origin, "exit_code": returncode, "stderr_tail": stderr_tail}
    try:
        result = from_answer(name, origin, schema.parse_json(text), gpus)
    except (ValueError, Unreadable) as exc:
        summary = f"printed an answer gpuenv cannot read: {str(exc)[:200]}; {_tail(stderr_tail)}"
        return CheckResult(name, "error", summary=summary, detail=detail)
    said = result.status
    if returncode not in (0, NAGIOS.index(said) if said in NAGIOS else 0):
        word = NAGIOS_WORDS[returncode] if 0 <= returncode < len(NAGIOS) else "not a Nagios code"
        summary = f"exited {returncode} ({word}) but its JSON says {said}: the two disagree"
        return CheckResult(name, "error", summary=summary, detail=detail)
    result.detail.update(detail)
    return result


def _tail(stderr_tail: str) -> str:
    lines = [line for line in stderr_tail.splitlines() if line.strip()]
    return f"stderr: {lines[-1][:200]}" if lines else "nothing on stderr"


def from_python(name: str, origin: str, returned: Any, gpus: tuple[GpuInfo, ...]) -> CheckResult:
    """What a Python check's run() returned: a gpuenv.sitecheck.Result, else an error."""
    if not isinstance(returned, Result):
        what = type(returned).__name__
        return CheckResult(name, "error", summary=f"run() returned a {what}, not a gpuenv.sitecheck.Result")
    try:
        return from_answer(name, origin, _plain(returned), gpus)
    except Unreadable as exc:
        return CheckResult(name, "error", summary=f"returned a result gpuenv cannot read: {exc}"[:300])


def _plain(result: Any) -> dict[str, Any]:
    """A Result as the JSON answer a program prints (status left out: the findings decide it)."""
    metrics = {
        key: {
            "value": {str(k): v for k, v in m.value.items()} if isinstance(m.value, Mapping) else m.value,
            "unit": m.unit,
            "better": m.better,
        }
        for key, m in result.metrics.items()
    }
    findings = [dataclasses.asdict(f) for f in result.findings]
    status = result.status or "pass"
    return {"status": status, "summary": result.summary, "findings": findings, "metrics": metrics}


def from_answer(name: str, origin: str, answer: Any, gpus: tuple[GpuInfo, ...]) -> CheckResult:
    """A check's answer as a result; Unreadable when it breaks the schema or names a GPU the run
    does not check. A status better than a finding's severity is raised to it."""
    try:
        schema.check(answer, "site-result")
    except schema.SchemaViolation as exc:
        raise Unreadable(str(exc)) from None
    by_index = {g.index: g for g in gpus}
    findings = [_finding(name, f, by_index) for f in answer.get("findings", [])]
    metrics, figures = {}, {}
    for key, metric in answer.get("metrics", {}).items():
        value = metric["value"]
        per_gpu = isinstance(value, dict)
        where = f"metric {key}"
        metrics[key] = {str(_cuda(int(i), by_index, where)): v for i, v in value.items()} if per_gpu else value
        figures[key] = {"unit": metric["unit"], "better": metric["better"], "per_gpu": per_gpu}
    said = status = answer["status"]
    severities = {f.severity for f in findings}
    if "fail" in severities:
        status = "fail"
    elif "warn" in severities and status == "pass":
        status = "warn"
    summary = (status == said and answer.get("summary")) or summarize(findings, answer.get("summary") or status)
    return CheckResult(
        name, status, summary=summary, metrics=metrics, findings=findings, detail={"origin": origin}, figures=figures
    )


def _finding(check: str, data: dict[str, Any], by_index: dict[int, GpuInfo]) -> Finding:
    gpu = None
    if data.get("gpu") is not None:
        info = by_index.get(data["gpu"])
        _cuda(data["gpu"], by_index, f"finding {data['code']}")
        assert info is not None
        gpu = GpuRef(info.cuda_index if info.cuda_index is not None else info.index, info.uuid, info.pci_bus_id)
    return Finding(
        data["severity"],
        data["message"],
        data.get("remediation"),
        data.get("action", "none"),
        gpu,
        item=data["code"],
        code=f"{check}.{data['code']}",
    )


def _cuda(index: int, by_index: dict[int, GpuInfo], where: str) -> int:
    """The CUDA index (as the report keys GPUs) of the GPU with this NVML index in the run."""
    info = by_index.get(index)
    if info is None:
        checked = ", ".join(map(str, sorted(by_index))) or "none: CPU only"
        raise Unreadable(f"{where} names GPU {index}, which this run does not check (GPUs: {checked})")
    return info.cuda_index if info.cuda_index is not None else info.index
