"""A site check's figures against the baselines `fleet baseline learn` learned of them
(`gpuenv verify --baseline FILE`), as gpuenv's own figures are judged."""

from __future__ import annotations

from typing import Any

from gpuenv.verify.baselines import Baselines
from gpuenv.verify.catalogue import finding
from gpuenv.verify.facts import HostFacts
from gpuenv.verify.figures import readings
from gpuenv.verify.model import CheckResult, status_from_findings, summarize

RANK = {"pass": 0, "warn": 1, "fail": 2}


def judged(result: CheckResult, baselines: Baselines, host: HostFacts) -> None:
    """A site check's figures against the baselines' rows for this GPU model and count (what `fleet
    baseline learn` learned of them): under fail_below fails, under warn_below warns, as gpuenv's
    own figures. The result's status is raised where a figure is worse than its finding says."""
    gpu_name = next((g.name for g in host.gpus if g.name), None)
    if gpu_name is None or result.status not in RANK:
        return
    found = []
    for r in readings([{"name": result.name, "metrics": result.metrics, "figures": result.figures}]):
        expected = baselines.expected_figure(r.figure.name, gpu_name, len(host.gpus))
        verdict = baselines.judge(r.value, expected, r.figure.better) if expected is not None else "pass"
        if verdict == "pass":
            continue
        gpu = host.gpu_ref(r.gpu_index) if r.gpu_index is not None else None
        where = f"{gpu.label()}: " if gpu is not None else ""
        message = f"{where}{r.figure.name} {r.value:g} {r.figure.unit} vs {expected:g} expected on {gpu_name}"
        limits = {"fail_below": baselines.fail_below, "warn_below": baselines.warn_below}
        fields: dict[str, Any] = {"baseline": baselines.origin, **limits}  # the remediation's
        if verdict == "fail":
            found.append(finding("verify.site-figure-below-baseline", message, gpu=gpu, **fields))
        else:
            found.append(finding("verify.site-figure-under-baseline", message, gpu=gpu, **fields))
    result.findings += found
    raised = status_from_findings(result.findings)
    if found and RANK[raised] > RANK[result.status]:
        result.status, result.summary = raised, summarize(found, result.summary)
