"""memory (deep): most of each GPU's free memory written and read back with patterns; then the
headroom for training: the largest batch of the NLP model (BERT-base-shaped, AMP) that fits on
GPU 0 (a bounded search that catches torch.cuda.OutOfMemoryError, frees and retries, as dynamic
batching does), the activation memory gradient checkpointing saves, and proof that the process
recovers from an out-of-memory error. The CPU has no catchable OOM (the kernel's OOM killer ends
the process), so the check skips there."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable
from typing import Any

from gpuenv.verify.catalogue import finding
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize
from gpuenv.verify.workloads import common, nlp

FRACTION = 0.85
CHUNK = 256 << 20
PATTERNS = (0x00, 0xFF, 0xAA, 0x55)


def run(ctx: CheckContext) -> CheckResult:
    import torch  # torch: heavy, loaded only where the check runs

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
    headroom = training_headroom(devices[0])
    findings += evaluate_headroom(headroom)
    default = (
        f"{tested / 2**30:.1f} GiB written and read back on {len(devices)} GPU(s); NLP batch up to "
        f"{headroom['nlp_max_batch']} fits on GPU 0, checkpointing saves {headroom['checkpoint_saving_gib']:.2f} GiB"
    )
    free_gib = {str(i): round(torch.cuda.mem_get_info(d)[0] / 2**30, 2) for i, d in enumerate(devices)}
    return CheckResult(
        "memory",
        status_from_findings(findings),
        summary=summarize(findings, default),
        metrics={"bytes_tested": tested, "free_gib": free_gib, **headroom},
        findings=findings,
    )


SEARCH_TRIES = 14  # training steps the batch search may spend
BATCH_CAP = 8192


def largest_fitting(fits: Callable[[int], bool], *, start: int, cap: int, tries: int) -> tuple[int, int]:
    """Pure: the largest batch for which `fits` holds, doubling from `start` until one does not
    fit (or `cap`), then bisecting, in at most `tries` calls. Returns (batch, calls); batch 0
    when not even a batch of 1 fits."""
    ok, bad, calls, batch = 0, None, 0, start
    while calls < tries:
        calls += 1
        if fits(batch):
            ok = batch
        else:
            bad = batch
        if bad is None:
            if ok >= cap:
                break
            batch = min(ok * 2, cap)
        elif bad - ok <= 1:
            break
        else:
            batch = (ok + bad) // 2 if ok else bad // 2
    return ok, calls


def evaluate_headroom(headroom: dict[str, Any]) -> list[Finding]:
    """Pure: some batch fits, the process recovered from an OOM, checkpointing saves memory."""
    out = []
    if not headroom["nlp_max_batch"]:
        out.append(finding("memory.nothing-fits", "not even one NLP sequence batch fits on GPU 0"))
    if not headroom["oom_recovered"]:
        message = f"after an out-of-memory error the process could not train again: {headroom['oom_detail']}"
        out.append(finding("memory.oom-not-recovered", message))
    if headroom["nlp_max_batch"] and not headroom["checkpoint_saving_gib"] > 0:  # NaN: a step did not fit
        message = (
            f"gradient checkpointing saved no memory ({headroom['checkpoint_peak_gib']} GiB peak with it, "
            f"{headroom['plain_peak_gib']} GiB without)"
        )
        out.append(finding("memory.checkpoint-saves-nothing", message))
    return out


def training_headroom(dev: Any) -> dict[str, Any]:
    size = nlp.size_for("cuda", "deep")
    model = nlp.build(size, dev)
    precision = nlp.precision_for(dev)

    def fits(batch: int) -> bool:
        return _step_fits(model, dataclasses.replace(size, micro_batch=batch, accumulate=1), dev, precision)

    best, tries = largest_fitting(fits, start=8, cap=BATCH_CAP, tries=SEARCH_TRIES)
    probe = dataclasses.replace(size, micro_batch=max(1, best // 2), accumulate=1)
    plain = _peak_gib(model, probe, dev, precision, checkpointed=False)
    ckpt = _peak_gib(model, probe, dev, precision, checkpointed=True)
    recovered, detail = _recovers_from_oom(model, size, dev, precision)
    _free(dev)
    return {
        "nlp_max_batch": best,
        "nlp_max_tokens": best * size.seq_len,
        "search_tries": tries,
        "plain_peak_gib": round(plain, 3),
        "checkpoint_peak_gib": round(ckpt, 3),
        "checkpoint_saving_gib": round(plain - ckpt, 3),
        "checkpoint_batch": probe.micro_batch,
        "oom_recovered": recovered,
        "oom_detail": detail,
    }


def _step_fits(model: Any, size: Any, dev: Any, precision: str) -> bool:
    import torch  # torch: heavy, loaded only where the check runs

    try:
        nlp.train_steps(model, size, dev, steps=1, precision=precision)
        torch.cuda.synchronize(dev)
        return True
    except torch.cuda.OutOfMemoryError:
        return False
    except RuntimeError as exc:  # cuBLAS/cuDNN workspaces that do not fit raise a plain RuntimeError
        if "ALLOC_FAILED" in str(exc) or "out of memory" in str(exc):
            return False
        raise
    finally:
        model.zero_grad(set_to_none=True)
        _free(dev)


def _free(dev: Any) -> None:
    import torch  # torch: heavy, loaded only where the check runs

    gc.collect()
    torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()


def _peak_gib(model: Any, size: Any, dev: Any, precision: str, *, checkpointed: bool) -> float:
    """Peak memory of one forward/backward, with each encoder layer checkpointed or not."""
    import torch  # torch: heavy, loaded only where the check runs
    from torch.utils.checkpoint import checkpoint  # torch: heavy, loaded only where the check runs

    layers = model.layers.layers
    originals = [layer.forward for layer in layers]
    if checkpointed:
        for layer, forward in zip(layers, originals, strict=True):
            layer.forward = lambda *a, _f=forward, **k: checkpoint(_f, *a, use_reentrant=False, **k)
    try:
        _free(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        if not _step_fits(model, size, dev, precision):
            return float("nan")
        return float(torch.cuda.max_memory_allocated(dev)) / 2**30
    finally:
        for layer, forward in zip(layers, originals, strict=True):
            layer.forward = forward


def _recovers_from_oom(model: Any, size: Any, dev: Any, precision: str) -> tuple[bool, str]:
    """Ask for twice the GPU's memory (a certain OOM), then train one step."""
    import torch  # torch: heavy, loaded only where the check runs

    total = torch.cuda.get_device_properties(dev).total_memory
    try:
        torch.empty(2 * total, dtype=torch.uint8, device=dev)
        return False, "allocating twice the GPU's memory did not raise OutOfMemoryError"
    except torch.cuda.OutOfMemoryError:
        pass
    _free(dev)
    small = dataclasses.replace(size, micro_batch=8, accumulate=1)
    if _step_fits(model, small, dev, precision):
        return True, "OutOfMemoryError caught, memory freed, a training step ran after it"
    return False, "a batch of 8 no longer fits after the OutOfMemoryError"
