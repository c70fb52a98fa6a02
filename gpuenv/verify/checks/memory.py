"""memory (deep): most of each GPU's free memory written and read back with patterns."""

from __future__ import annotations

from gpuenv.verify.catalogue import finding
from gpuenv.verify.checks import common
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize

FRACTION = 0.85
CHUNK = 256 << 20
PATTERNS = (0x00, 0xFF, 0xAA, 0x55)


def run(ctx: CheckContext) -> CheckResult:
    import torch

    if ctx.device == "cpu":
        return CheckResult("memory", "skip", summary="GPU memory test: CPU only")
    devices = common.workload_devices(ctx.device)
    findings: list[Finding] = []
    tested = 0
    for i, dev in enumerate(devices):
        pattern_row = (torch.arange(CHUNK, device=dev, dtype=torch.int32) % 251).to(torch.uint8)
        free, _total = torch.cuda.mem_get_info(dev)
        chunks = [torch.empty(CHUNK, dtype=torch.uint8, device=dev) for _ in range(int(free * FRACTION) // CHUNK)]
        bad = 0
        for pattern in PATTERNS:
            for c in chunks:
                c.fill_(pattern)
            torch.cuda.synchronize(dev)
            bad += sum(int((c != pattern).sum().item()) for c in chunks)
        for k, c in enumerate(chunks):  # address-dependent pattern
            c.copy_(pattern_row).add_(k % 5)
        bad += sum(int((c != pattern_row + k % 5).sum().item()) for k, c in enumerate(chunks))
        tested += len(chunks) * CHUNK
        del chunks, pattern_row
        torch.cuda.empty_cache()
        if bad:
            message = f"{ctx.gpu_ref(i).label()}: {bad} byte(s) read back wrong"
            findings.append(finding("memory.bad-bytes", message, gpu=ctx.gpu_ref(i)))
    default = f"{tested / 2**30:.1f} GiB written and read back on {len(devices)} GPU(s)"
    return CheckResult(
        "memory",
        status_from_findings(findings),
        summary=summarize(findings, default),
        metrics={"bytes_tested": tested},
        findings=findings,
    )
