"""amp: a small model's training under fp16 (GradScaler) and bf16 autocast, against fp32.

Also: the same seeded step on every GPU giving identical checksums (silent data corruption;
repeated on one device where there is only one), gradient checkpointing matching plain backward,
matmul TFLOP/s by shape and device memory copy bandwidth (throughput.py: CUDA events, after a
warm-up from idle clocks) against the GPU model's expected figures and the node's other GPUs, and
energy per matmul from NVML. (The DDP step runs
in the allreduce check's ranks: one NCCL initialisation.)
An item that cannot truly run here is skipped on the CPU path and fails on a GPU node.
"""

from __future__ import annotations

import math
from typing import Any

from gpuenv.verify.catalogue import finding
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize
from gpuenv.verify.workloads import common, throughput

STEPS = 30
FALL = 0.5  # the loss must fall under half its start when overfitting one batch
AMP_CLOSE = {"float16": 2e-2, "bfloat16": 5e-2}  # first-step loss vs fp32, relative


class PlainSGD:
    """SGD with momentum, duck-typed for GradScaler: torch.optim's first step imports
    torch._dynamo (over a second), which the quick level cannot afford."""

    def __init__(self, params: Any, lr: float, momentum: float = 0.9) -> None:
        self.param_groups: list[dict[str, Any]] = [{"params": list(params), "lr": lr}]
        self.momentum = momentum
        self.velocity: dict[int, Any] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.param_groups[0]["params"]:
            p.grad = None

    def step(self) -> None:
        torch = common.torch_module()

        with torch.no_grad():
            for p in self.param_groups[0]["params"]:
                if p.grad is None:
                    continue
                v = self.velocity.get(id(p))
                v = p.grad.clone() if v is None else v.mul_(self.momentum).add_(p.grad)
                self.velocity[id(p)] = v
                p.add_(v, alpha=-self.param_groups[0]["lr"])


def model_for(device: Any) -> Any:
    torch = common.torch_module()

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    ).to(device)


def _batch(device: Any) -> tuple[Any, Any]:
    torch = common.torch_module()

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(128, 64, generator=gen)
    y = torch.randint(0, 10, (128,), generator=gen)
    return x.to(device), y.to(device)


def train(device: Any, dtype: str | None, *, scaler: Any = None) -> dict[str, Any]:
    """Overfit one batch; returns losses, whether grads stayed finite and the final scale."""
    torch = common.torch_module()

    model = model_for(device)
    opt = PlainSGD(model.parameters(), lr=0.1)
    x, y = _batch(device)
    losses, skipped, finite_grads = [], 0, True
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        if dtype:
            with torch.autocast(device.type, dtype=getattr(torch, dtype)):
                loss = torch.nn.functional.cross_entropy(model(x), y)
        else:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        losses.append(float(loss.float().item()))
        if scaler is not None:
            before = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            skipped += scaler.get_scale() < before
        else:
            loss.backward()
            finite_grads &= all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
            opt.step()
    return {
        "losses": losses,
        "skipped": skipped,
        "finite_grads": finite_grads,
        "scale": scaler.get_scale() if scaler is not None else None,
    }


def judge_run(name: str, run: dict[str, Any], fp32: dict[str, Any], *, item: str, dtype: str | None) -> list[Finding]:
    """Pure: the loss is finite and falls, the scale does not collapse, AMP is close to fp32."""
    losses = run["losses"]
    out = []
    if not all(math.isfinite(v) for v in losses) or not run["finite_grads"]:
        return [finding("amp.non-finite", f"{name}: non-finite loss or gradients", item=item)]
    if losses[-1] > FALL * losses[0]:
        message = f"{name}: loss did not fall ({losses[0]:.3f} -> {losses[-1]:.3f} in {len(losses)} steps)"
        out.append(finding("amp.loss-not-falling", message, item=item))
    if run["scale"] is not None and (run["scale"] < 1.0 or run["skipped"] > len(losses) // 2):
        message = f"{name}: GradScaler scale collapsed to {run['scale']:g} ({run['skipped']} skipped steps)"
        out.append(finding("amp.scale-collapse", message, item=item))
    tolerance = AMP_CLOSE.get(dtype) if dtype else None
    if tolerance is not None:
        diff = abs(losses[0] - fp32["losses"][0]) / max(abs(fp32["losses"][0]), 1e-6)
        if diff > tolerance:
            message = f"{name}: first loss {losses[0]:.4f} differs from fp32 {fp32['losses'][0]:.4f} by {diff:.1%}"
            out.append(finding("amp.far-from-fp32", message, item=item))
    return out


def _fp16(dev: Any, cuda: bool, fp32: dict[str, Any]) -> tuple[list[Finding], list[str]]:
    torch = common.torch_module()

    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        scaler = amp.GradScaler(dev.type)
    elif cuda:
        scaler = torch.cuda.amp.GradScaler()
    else:
        return [], ["fp16 GradScaler: torch.amp.GradScaler('cpu') needs torch >= 2.3"]
    if not scaler.is_enabled():
        if cuda:
            return [finding("amp.gradscaler-disabled", "fp16 GradScaler disabled itself: CUDA unusable")], []
        return [], ["fp16 GradScaler disabled itself on this device"]
    try:
        run = train(dev, "float16", scaler=scaler)
    except RuntimeError as exc:
        if not cuda and ("not support" in str(exc) or "dtype" in str(exc)):
            return [], [f"fp16 autocast on the CPU: {str(exc).splitlines()[0]}"]
        raise
    return judge_run("float16 autocast + GradScaler", run, fp32, item="fp16", dtype="float16"), []


def _bf16(dev: Any, cuda: bool, fp32: dict[str, Any]) -> tuple[list[Finding], list[str]]:
    torch = common.torch_module()

    if cuda and not torch.cuda.is_bf16_supported():
        return [], [f"bf16: not supported by {torch.cuda.get_device_name(dev)}"]
    run = train(dev, "bfloat16")
    return judge_run("bfloat16 autocast", run, fp32, item="bf16", dtype="bfloat16"), []


def checkpoint_matches(dev: Any) -> bool:
    torch = common.torch_module()
    from torch.utils.checkpoint import checkpoint  # torch: heavy, loaded only where the check runs

    x, y = _batch(dev)
    grads = []
    for use_ckpt in (False, True):
        model = model_for(dev)
        hidden = checkpoint(model[:4], x, use_reentrant=False) if use_ckpt else model[:4](x)
        torch.nn.functional.cross_entropy(model[4](hidden), y).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    return all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(*grads, strict=True))


def step_checksum(dev: Any) -> str:
    """One seeded fp32 step; the checksum of the parameters after it, bit-exact."""
    torch = common.torch_module()

    with common.full_fp32():
        model = model_for(dev)
        opt = PlainSGD(model.parameters(), lr=0.1)
        x, y = _batch(dev)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        flat = torch.cat([p.detach().double().flatten().cpu() for p in model.parameters()])
        return f"{float(flat.sum()):.17g}/{float((flat * flat).sum()):.17g}"


def checksum_findings(sums: dict[int, str], ctx: CheckContext) -> list[Finding]:
    """Pure: every GPU gives the majority's checksum, or it is named."""
    if len(sums) < 2:
        return []
    values = list(sums.values())
    majority = max(set(values), key=values.count)
    return [
        finding(
            "amp.checksum-mismatch",
            f"{ctx.gpu_ref(i).label()}: the seeded training step gives checksum {s}, the other GPUs {majority} "
            "(silent data corruption)",
            gpu=ctx.gpu_ref(i),
        )
        for i, s in sums.items()
        if s != majority
    ]


def run(ctx: CheckContext) -> CheckResult:
    torch = common.torch_module()

    devices = common.workload_devices(ctx.device)
    cuda = ctx.device == "cuda"
    dev = devices[0]
    fp32 = train(dev, None)
    findings = judge_run("fp32", fp32, fp32, item="fp32", dtype=None)
    skipped: list[str] = []
    for part in (_fp16, _bf16):
        found, skip = part(dev, cuda, fp32)
        findings += found
        skipped += skip
    if not checkpoint_matches(dev):
        message = "gradient checkpointing gives different gradients than plain backward"
        findings.append(finding("amp.checkpoint-mismatch", message))
    sums = {i: step_checksum(d) for i, d in enumerate(devices)}
    if len(devices) == 1:
        sums[1] = step_checksum(dev)  # one device: the same step twice must repeat exactly
    findings += checksum_findings(sums, ctx)
    metrics, perf = _performance(ctx, devices, cuda)
    findings += perf
    findings += [finding("amp.skipped", f"skipped: {s}") for s in skipped]
    metrics.update(
        {"loss_fp32": [round(fp32["losses"][0], 4), round(fp32["losses"][-1], 4)], "torch": torch.__version__}
    )
    default = (
        f"fp32{'/fp16' if not any('fp16' in s for s in skipped) else ''}/bf16 training on "
        f"{len(devices)} {'GPU' if cuda else 'CPU'} device(s); {metrics['matmul_tflops_min']:.2f} TFLOP/s "
        f"{metrics['matmul_dtype']}, {metrics['copy_gbps_min']:.0f} GB/s memory copy"
    )
    return CheckResult(
        "amp",
        status_from_findings(findings),
        summary=summarize(findings, default),
        metrics=metrics,
        findings=findings,
        detail={"skipped": skipped},
    )


def _performance(ctx: CheckContext, devices: list[Any], cuda: bool) -> tuple[dict[str, Any], list[Finding]]:
    metrics = throughput.measure(ctx, devices, cuda)
    return metrics, throughput.judge(metrics, ctx, common.gpu_model(ctx), cuda=cuda)
