"""XIDs the driver logged in the kernel log during a job (NVML's event set sees only the XIDs
that happen while it is registered). Pure parsing here; the reader of /dev/kmsg is `read_kmsg`."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

# the driver's line: "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus."
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\): (\d+)")
_START = re.compile(r"\bStartTime=(\S+)")
_RECOVERY = re.compile(r"recovery action changed from 0x[0-9a-fA-F]+ \([^)]*\) to 0x([0-9a-fA-F]+)")


@dataclass(frozen=True)
class KernelXid:
    bus: str  # domain:bus:device, as bus_key writes it
    xid: int
    since_boot: float  # seconds
    text: str


def bus_key(domain: str, bus: str, device: str) -> str:
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}"


def nvml_bus_key(pci_bus_id: str | None) -> str | None:
    """NVML's 00000000:18:00.0 as the kernel log names it (0000:18:00)."""
    parts = (pci_bus_id or "").split(".")[0].split(":")
    return bus_key(*parts) if len(parts) == 3 else None


def parse_kmsg(lines: Iterable[str]) -> list[KernelXid]:
    """The XID records among /dev/kmsg's lines ("prio,seq,usec,flags;message"); continuation lines
    (a leading space) and anything else are ignored."""
    found = []
    for line in lines:
        prefix, sep, message = line.partition(";")
        fields = prefix.split(",")
        match = _XID.search(message)
        if not sep or line.startswith(" ") or len(fields) < 3 or not fields[2].isdigit() or not match:
            continue
        domain, bus, device, xid = match.groups()
        found.append(KernelXid(bus_key(domain, bus, device), int(xid), int(fields[2]) / 1e6, message.strip()))
    return found


def job_events(
    records: list[KernelXid], since_boot: float, gpus: list[dict[str, Any]]
) -> list[tuple[int, int, int | None]]:
    """(NVML index, XID, the recovery action XID 154 names, else None) of the records at or after
    `since_boot` on these GPUs (NVML snapshot dicts)."""
    index = {nvml_bus_key(g.get("pci_bus_id")): int(g["index"]) for g in gpus}
    return [
        (index[r.bus], r.xid, recovery_action(r.text) if r.xid == 154 else None)
        for r in records
        if r.since_boot >= since_boot and r.bus in index
    ]


def recovery_action(text: str) -> int | None:
    """The action XID 154's line changes to ("... changed from 0x0 (None) to 0x2 (Node Reboot
    Required)": 2), or None where the line does not say."""
    match = _RECOVERY.search(text)
    return int(match.group(1), 16) if match else None


def start_from_scontrol(text: str) -> float | None:
    """The job's StartTime (local time, as scontrol prints it) as a Unix time; None if not started."""
    match = _START.search(text)
    try:
        return datetime.fromisoformat(match.group(1)).timestamp() if match else None
    except ValueError:  # "Unknown", "None"
        return None


def read_kmsg(path: Path = Path("/dev/kmsg")) -> list[str]:
    """Every record the kernel still holds, without waiting for new ones. /dev/kmsg answers one
    record a read and EAGAIN at the end; a regular file (tests) reads in chunks to EOF."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(fd, 16384)
            except BlockingIOError:
                break
            except BrokenPipeError:  # records overwritten while we read: the next read goes on
                continue
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace").splitlines()
