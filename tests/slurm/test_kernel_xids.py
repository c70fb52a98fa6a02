"""XIDs from the kernel log during a job: the pure parser over real /dev/kmsg records, the reader
over a file, and the epilog's judgement (no Slurm needed: the start time comes from the env)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gpuenv.slurm import core, kernel_xids, service
from gpuenv.verify import reportfile

# /dev/kmsg records as the 535/550 drivers write them (prio,seq,usec since boot,flags;message),
# with the continuation lines the kernel adds for device messages
RECORDS = [
    "6,1201,5000000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
    "4,1530,7200000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=2345, name=python3, GPU has fallen off the bus.",
    " SUBSYSTEM=pci",
    " DEVICE=+pci:0000:18:00.0",
    "4,1531,7200100000,-;NVRM: Xid (PCI:0000:3a:00): 13, pid=2345, name=python3, Graphics SM Warp Exception",
    "4,1532,7300000000,-;NVRM: Xid (PCI:0001:9B:00): 94, pid='<unknown>', name=<unknown>, Contained: SM (0x1).",
    "4,1533,7300000000,-;kernel: some other driver said Xid (PCI:0000:18:00): 48",
]


def gpu(index: int, bus: str) -> dict[str, Any]:
    return {"index": index, "uuid": f"GPU-{index}", "pci_bus_id": bus}


GPUS = [gpu(0, "00000000:18:00.0"), gpu(1, "00000000:3a:00.0"), gpu(2, "00000001:9b:00.0")]


def test_the_parser_reads_the_drivers_xid_lines_only() -> None:
    found = kernel_xids.parse_kmsg(RECORDS)
    assert [(r.bus, r.xid, r.since_boot) for r in found] == [
        ("0000:18:00", 79, 7200.0),
        ("0000:3a:00", 13, 7200.1),
        ("0001:9b:00", 94, 7300.0),
    ]
    assert found[0].text.startswith("NVRM: Xid (PCI:0000:18:00): 79, pid=2345")


def test_events_map_bus_ids_to_the_jobs_gpus_since_the_start() -> None:
    records = kernel_xids.parse_kmsg(RECORDS)
    assert kernel_xids.job_events(records, 7200.05, GPUS) == [(1, 13, None), (2, 94, None)]
    assert kernel_xids.job_events(records, 0, GPUS[:1]) == [(0, 79, None)]  # GPU 1 and 2 not the job's
    assert kernel_xids.job_events(records, 8000, GPUS) == []
    assert kernel_xids.nvml_bus_key("00000000:18:00.0") == "0000:18:00"
    assert kernel_xids.nvml_bus_key(None) is None


def test_xid_154_carries_the_recovery_action_its_line_names() -> None:
    line = (
        "4,1600,7400000000,-;NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) "
        "to 0x2 (Node Reboot Required)"
    )
    records = kernel_xids.parse_kmsg([line, line.replace("0x2 (Node Reboot Required)", "0x0 (None)")])
    assert kernel_xids.job_events(records, 0, GPUS) == [(0, 154, 2), (0, 154, 0)]
    assert kernel_xids.recovery_action("NVRM: Xid (PCI:0000:18:00): 154, something else") is None


def test_start_time_from_scontrol() -> None:
    line = "JobId=42 JobName=train UserId=a(1000) JobState=COMPLETING SubmitTime=2026-11-30T17:00:00 "
    assert kernel_xids.start_from_scontrol(line + "StartTime=2026-11-30T17:00:05 EndTime=2026-11-30T17:10:00") == (
        pytest.approx(time.mktime((2026, 11, 30, 17, 0, 5, 0, 0, -1)))
    )
    assert kernel_xids.start_from_scontrol(line + "StartTime=Unknown EndTime=Unknown") is None
    assert kernel_xids.start_from_scontrol("JobId=42") is None


def test_the_reader_reads_a_file_to_its_end(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_text("\n".join(RECORDS * 200) + "\n")  # larger than one read
    assert kernel_xids.read_kmsg(log) == RECORDS * 200


def report(gpus: list[dict[str, Any]] | None) -> reportfile.VerifyReport:
    """A report whose nvml check holds an NVML snapshot of these GPUs (no nvml check: None), as the hooks read it."""
    checks = [{"name": "nvml", "status": "pass", "detail": {"snapshot": {"gpus": gpus}}}] if gpus is not None else []
    found = reportfile.decode(json.dumps({"schema": reportfile.SCHEMA_V2, "checks": checks}).encode())
    assert isinstance(found, reportfile.VerifyReport)
    return found


def kmsg_at(tmp_path: Path, *xids: tuple[str, int, float]) -> Path:
    """A kmsg file with XID records (bus, xid, seconds ago)."""
    now = time.monotonic()
    lines = [
        f"4,{n},{int((now - ago) * 1e6)},-;NVRM: Xid (PCI:{bus}): {xid}, pid=1, name=python3, test"
        for n, (bus, xid, ago) in enumerate(xids)
    ]
    path = tmp_path / "kmsg"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_epilog_judges_xids_during_the_job_like_the_nvml_check(tmp_path: Path) -> None:
    kmsg = kmsg_at(tmp_path, ("0000:18:00", 79, 600), ("0000:18:00", 79, 30), ("0000:3a:00", 13, 20))
    env = {"SLURM_JOB_START_TIME": str(int(time.time() - 120)), "CUDA_VISIBLE_DEVICES": "0,1"}
    found, note = service.job_kernel_xids(report(GPUS), env, kmsg)
    assert [(f.code, f.severity, f.action, f.gpu.index if f.gpu else None) for f in found] == [
        ("nvml.xid", "fail", "drain", 0),  # the one 600 s ago was before the job
        ("nvml.xid-other", "warn", "monitor", 1),
    ]
    assert note is not None and "XID 13" in note
    reason = service._finding_reason(found[0])
    assert (
        reason.startswith("gpuenv: nvml.xid GPU0 ") and "XID 79 (GPU has fallen off the bus) during the job" in reason
    )
    assert len(reason) <= core.REASON_MAX


def test_the_epilog_says_what_it_could_not_read(tmp_path: Path) -> None:
    kmsg = kmsg_at(tmp_path, ("0000:18:00", 79, 30))
    assert service.job_kernel_xids(report(GPUS), {}, kmsg) == (
        [],
        "kernel log not read: the job's start time is unknown",
    )
    env = {"SLURM_JOB_START_TIME": str(int(time.time() - 120))}
    found, note = service.job_kernel_xids(report(GPUS), env, tmp_path / "absent")
    assert found == [] and note is not None and note.startswith("kernel log not read: ") and "absent" in note
    found, note = service.job_kernel_xids(report(None), env, kmsg)
    assert found == [] and note is not None and "no NVML snapshot" in note
