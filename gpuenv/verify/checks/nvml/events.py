"""Events the GPU reported, judged by the vendors' own catalogues (pure, but for reading them): an
XID by its resolution bucket in NVIDIA's XID catalogue (gpuenv/data/xids.json), XID 154 by the
GPU recovery action NVML reported with it; an AMD RAS error count by its class (amd-ras.json).
What each bucket or class does to the node is policy (nvml-policy.json: xid_buckets,
recovery_action_buckets, ras_classes). The catalogues are read only when an event is seen, so a
clean node's passive check pays nothing for them."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any

from gpuenv.resources import data_file
from gpuenv.schema import load as load_data_file
from gpuenv.verify import catalogue
from gpuenv.verify.checks.nvml.policy import rule_finding
from gpuenv.verify.facts import GpuInfo
from gpuenv.verify.model import Finding, GpuRef

RECOVERY_XID = 154  # "GPU recovery action changed": its bucket is the recovery action's
UNREAD_RECOVERY = "XID_154"  # the bucket of an XID 154 whose recovery action could not be read


@cache
def xid_catalogue() -> dict[str, Any]:
    return dict(load_data_file(data_file("xids.json"), "XID catalogue", "xids"))


@cache
def ras_catalogue() -> dict[str, Any]:
    return dict(load_data_file(data_file("amd-ras.json"), "AMD RAS catalogue", "amd-ras"))


def xid_findings(
    events: list[Any], gpus: tuple[GpuInfo, ...], policy: dict[str, Any], *, during: str = "the run"
) -> list[Finding]:
    """One finding per XID event ((NVML index, XID), or (NVML index, XID, the GPU's recovery action
    or None)), with NVIDIA's meaning and the severity and action its bucket has."""
    by_index = {g.index: g for g in gpus}
    found = []
    for index, xid, *rest in events:
        g = by_index[index].ref() if index in by_index else GpuRef(index)
        bucket, said = _bucket(int(xid), rest[0] if rest else None, policy)
        meaning = (xid_catalogue()["xids"].get(str(xid)) or {}).get("meaning", "not in NVIDIA's XID catalogue")
        message = f"{g.label()}: XID {xid} ({meaning}) during {during}{said}"
        found.append(_judged(message, g, bucket, xid, meaning, policy))
    return found


def _bucket(xid: int, recovery: int | None, policy: dict[str, Any]) -> tuple[str | None, str]:
    """The XID's resolution bucket (the policy's xids, else XID 154's recovery action, else the
    catalogue's) and what the message adds about it."""
    if str(xid) in policy["xids"]:
        return policy["xids"][str(xid)], f"; resolution {policy['xids'][str(xid)]} (policy)"
    if xid == RECOVERY_XID:
        if recovery is None:
            return UNREAD_RECOVERY, "; the GPU's recovery action could not be read"
        name = xid_catalogue()["recovery_actions"]["names"].get(str(recovery), f"action {recovery}")
        return policy["recovery_action_buckets"].get(str(recovery), UNREAD_RECOVERY), f"; recovery action: {name}"
    bucket = (xid_catalogue()["xids"].get(str(xid)) or {}).get("bucket")
    return bucket, f"; NVIDIA's resolution: {bucket}" if bucket else ""


def _judged(message: str, g: GpuRef, bucket: str | None, xid: int, meaning: str, policy: dict[str, Any]) -> Finding:
    judged = policy["xid_buckets"].get(bucket) if bucket else None
    if judged is None:  # not in the catalogue, or a bucket the policy does not know
        other = policy["other_xid"]
        rule = replace(catalogue.rules()["nvml.xid-other"], severity=other["severity"], action=other["action"])
        return catalogue.finding("nvml.xid-other", message, gpu=g, rule=rule, recovery="watch for it again (dmesg)")
    code = "nvml.xid" if judged["severity"] == "fail" else "nvml.xid-other"
    rule = replace(catalogue.rules()[code], severity=judged["severity"], action=judged["action"])
    return catalogue.finding(code, message, gpu=g, rule=rule, xid=xid, meaning=meaning, recovery=judged["recovery"])


def ras_findings(gpu: dict[str, Any], policy: dict[str, Any], g: GpuRef) -> list[Finding]:
    """(AMD) One finding per RAS error class with a count, by the rule the policy gives the class."""
    counts = {c: n for c, n in (gpu.get("ras") or {}).items() if n}
    found = []
    for klass, count in counts.items():
        rule = policy["ras_classes"].get(klass)
        if rule:
            meaning = ras_catalogue()["classes"][klass]["meaning"]
            text = f"{g.label()}: {count} {klass} ECC error(s) since the driver loaded ({meaning})"
            found.append(rule_finding(policy, rule, text, g))
    return found


def watch_findings(failures: list[dict[str, Any]], gpus: tuple[GpuInfo, ...], policy: dict[str, Any]) -> list[Finding]:
    """The XID watch's calls that failed (the event set, a GPU's registration, the wait), by class:
    a GPU lost fails, a failed call warns, an absent answer (no events on this GPU) is info."""
    by_index = {g.index: g.ref() for g in gpus}
    found = []
    for f in failures:
        index = f.get("gpu")
        g = by_index.get(index, GpuRef(index)) if index is not None else None
        said = f"XID events not watched on {g.label() if g else 'the node'}: {f['call']} answered {f['code']}"
        if f["class"] == "absent":
            found.append(catalogue.finding("nvml.xid-unwatched", said))
        else:
            found.append(rule_finding(policy, "gpu_lost" if f["class"] == "lost" else "read_failed", said, g))
    return found
