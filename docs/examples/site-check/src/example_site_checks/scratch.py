"""scratch: the node's scratch file system is there, writes what it reads back, and is fast enough.

SCRATCH_DIR names the folder (default /scratch). The check writes 16 MiB there, reads it back and
reports the write rate, which `gpuenv fleet report` compares across the nodes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from gpuenv.sitecheck import Check, Context, Finding, Metric, Result

SIZE = 16 << 20


def run(ctx: Context) -> Result:
    folder = Path(os.environ.get("SCRATCH_DIR", "/scratch"))
    if not folder.is_dir():
        missing = Finding("missing", "fail", f"{folder} is not there", remediation="mount the scratch file system")
        return Result(findings=(missing,))
    probe = folder / f".gpuenv-scratch-{os.getpid()}"
    data = os.urandom(SIZE)
    try:
        started = time.monotonic()
        with open(probe, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        seconds = time.monotonic() - started
        same = probe.read_bytes() == data
    except OSError as exc:
        return Result(findings=(Finding("unwritable", "fail", f"{folder}: {exc.strerror}", action="drain"),))
    finally:
        probe.unlink(missing_ok=True)
    rate = SIZE / (1 << 20) / max(seconds, 1e-6)
    mismatch = Finding("mismatch", "fail", f"{folder} read back other bytes than written", action="drain")
    findings = () if same else (mismatch,)
    return Result(
        summary=f"{folder}: 16 MiB written at {rate:.0f} MiB/s and read back",
        findings=findings,
        metrics={"write_mib_per_s": Metric(rate, "MiB/s", "higher")},
    )


check = Check(
    name="scratch",
    run=run,
    timeout={"quick": 20, "standard": 30, "deep": 60},
    about="the scratch file system: 16 MiB written, read back, its write rate",
)
