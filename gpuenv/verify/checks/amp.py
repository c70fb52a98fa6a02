"""amp: a small model's training under fp16 (GradScaler) and bf16 autocast, against fp32.

Also: a DDP step across all GPUs (2 gloo ranks on the CPU), the same seeded step on every GPU
giving identical checksums (silent data corruption), gradient checkpointing matching plain
backward, matmul TFLOP/s against the GPU model's expected figure and energy per step from NVML.
An item that cannot truly run here is skipped on the CPU path and fails on a GPU node.
"""

from __future__ import annotations

import time
from typing import Any

from gpuenv.verify.baselines import load_baselines
from gpuenv.verify.checks import common
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, fail, info, status_from_findings, summarize, warn

STEPS = 30
FALL = 0.5  # the loss must fall under half its start when overfitting one batch
AMP_CLOSE = {"float16": 2e-2, "bfloat16": 5e-2}  # first-step loss vs fp32, relative
FIX_STACK = "reinstall the stack gpuenv resolve recommends; if only one GPU misbehaves, drain and test it"


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


def _model(device: Any) -> Any:
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

    model = _model(device)
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


def judge_run(name: str, run: dict[str, Any], fp32: dict[str, Any], *, item: str) -> list[Finding]:
    """Pure: the loss is finite and falls, the scale does not collapse, AMP is close to fp32."""
    import math

    losses = run["losses"]
    out = []
    if not all(math.isfinite(v) for v in losses) or not run["finite_grads"]:
        return [fail(f"{name}: non-finite loss or gradients", FIX_STACK, action="drain", item=item)]
    if losses[-1] > FALL * losses[0]:
        out.append(
            fail(
                f"{name}: loss did not fall ({losses[0]:.3f} -> {losses[-1]:.3f} in {len(losses)} steps)",
                FIX_STACK,
                action="drain",
                item=item,
            )
        )
    if run["scale"] is not None and (run["scale"] < 1.0 or run["skipped"] > len(losses) // 2):
        out.append(
            fail(
                f"{name}: GradScaler scale collapsed to {run['scale']:g} ({run['skipped']} skipped steps)",
                FIX_STACK,
                action="drain",
                item=item,
            )
        )
    tolerance = AMP_CLOSE.get(name.split()[0])
    if tolerance is not None:
        diff = abs(losses[0] - fp32["losses"][0]) / max(abs(fp32["losses"][0]), 1e-6)
        if diff > tolerance:
            out.append(
                fail(
                    f"{name}: first loss {losses[0]:.4f} differs from fp32 {fp32['losses'][0]:.4f} by {diff:.1%}",
                    FIX_STACK,
                    action="drain",
                    item=item,
                )
            )
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
            return [
                fail("fp16 GradScaler disabled itself: CUDA unusable", FIX_STACK, action="reinstall-stack", item="fp16")
            ], []
        return [], ["fp16 GradScaler disabled itself on this device"]
    try:
        run = train(dev, "float16", scaler=scaler)
    except RuntimeError as exc:
        if not cuda and ("not support" in str(exc) or "dtype" in str(exc)):
            return [], [f"fp16 autocast on the CPU: {str(exc).splitlines()[0]}"]
        raise
    return judge_run("float16 autocast + GradScaler", run, fp32, item="fp16"), []


def _bf16(dev: Any, cuda: bool, fp32: dict[str, Any]) -> tuple[list[Finding], list[str]]:
    torch = common.torch_module()

    if cuda and not torch.cuda.is_bf16_supported():
        return [], [f"bf16: not supported by {torch.cuda.get_device_name(dev)}"]
    run = train(dev, "bfloat16")
    return judge_run("bfloat16 autocast", run, fp32, item="bf16"), []


def checkpoint_matches(dev: Any) -> bool:
    torch = common.torch_module()
    from torch.utils.checkpoint import checkpoint

    x, y = _batch(dev)
    grads = []
    for use_ckpt in (False, True):
        model = _model(dev)
        hidden = checkpoint(model[:4], x, use_reentrant=False) if use_ckpt else model[:4](x)
        torch.nn.functional.cross_entropy(model[4](hidden), y).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    return all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(*grads, strict=True))


def step_checksum(dev: Any) -> str:
    """One seeded fp32 step; the checksum of the parameters after it, bit-exact."""
    torch = common.torch_module()

    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        model = _model(dev)
        opt = PlainSGD(model.parameters(), lr=0.1)
        x, y = _batch(dev)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        flat = torch.cat([p.detach().double().flatten().cpu() for p in model.parameters()])
        return f"{float(flat.sum()):.17g}/{float((flat * flat).sum()):.17g}"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow


def checksum_findings(sums: dict[int, str], ctx: CheckContext) -> list[Finding]:
    """Pure: every GPU gives the majority's checksum, or it is named."""
    if len(sums) < 2:
        return []
    values = list(sums.values())
    majority = max(set(values), key=values.count)
    return [
        fail(
            f"{ctx.gpu_ref(i).label()}: the seeded training step gives checksum {s}, the other GPUs {majority} "
            "(silent data corruption)",
            "drain the node and test this GPU (dcgmi diag -r 3); RMA if it repeats",
            action="drain",
            item="checksum",
            gpu=ctx.gpu_ref(i),
        )
        for i, s in sums.items()
        if s != majority
    ]


MATMUL_ITERS = {True: 20, False: 5}


def matmul_tflops(dev: Any, cuda: bool, level: str) -> tuple[float, str]:
    torch = common.torch_module()

    n = (8192 if level != "quick" else 4096) if cuda else 1024
    dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    iters = MATMUL_ITERS[cuda]
    a @ b
    common.sync(dev)
    t0 = time.perf_counter()
    for _ in range(iters):
        a @ b
    common.sync(dev)
    seconds = time.perf_counter() - t0
    return 2 * n**3 * iters / seconds / 1e12, "bf16" if cuda else "fp32"


def ddp_rank(rank: int, world: int, device: str, params: dict[str, Any]) -> dict[str, Any]:
    """One DDP step on every rank (different data per rank); params must agree afterwards."""
    torch = common.torch_module()
    from torch.nn.parallel import DistributedDataParallel

    dev = torch.device("cuda", rank) if device == "cuda" else torch.device("cpu")
    model = _model(dev)
    ddp = DistributedDataParallel(model, device_ids=[rank] if device == "cuda" else None)
    opt = PlainSGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64, 64, generator=gen).to(dev)
    y = torch.randint(0, 10, (64,), generator=gen).to(dev)
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
    opt.step()
    flat = torch.cat([p.detach().double().flatten().cpu() for p in model.parameters()])
    return {"rank": rank, "checksum": f"{float(flat.sum()):.17g}", "finite": bool(torch.isfinite(flat).all())}


def ddp_findings(results: list[dict[str, Any]]) -> list[Finding]:
    """Pure: after a DDP step every rank holds the same, finite parameters."""
    sums = {r["checksum"] for r in results}
    if len(sums) == 1 and all(r["finite"] for r in results):
        return []
    sums_text = ", ".join(f"rank {r['rank']}={r['checksum']}" for r in results)
    return [
        fail(
            f"DDP step: ranks disagree after one step ({sums_text})",
            "run gpuenv verify --check allreduce --level standard to find the GPU or link at fault",
            action="drain",
            item="ddp",
        )
    ]


def run(ctx: CheckContext) -> CheckResult:
    torch = common.torch_module()

    from gpuenv.verify import ranks

    devices = common.workload_devices(ctx.device)
    cuda = ctx.device == "cuda"
    dev = devices[0]
    world = common.world_size(ctx.device, ctx.cpu_ranks)
    # The DDP ranks run while this process does the single-device work.
    ddp = (
        ranks.start("gpuenv.verify.checks.amp:ddp_rank", check="amp", world=world, device=ctx.device, params={})
        if world >= 2
        else None
    )
    fp32 = train(dev, None)
    findings = judge_run("fp32", fp32, fp32, item="fp32")
    skipped: list[str] = []
    for part in (_fp16, _bf16):
        found, skip = part(dev, cuda, fp32)
        findings += found
        skipped += skip
    if not checkpoint_matches(dev):
        findings.append(
            fail(
                "gradient checkpointing gives different gradients than plain backward",
                FIX_STACK,
                action="reinstall-stack",
                item="checkpoint",
            )
        )
    sums = {i: step_checksum(d) for i, d in enumerate(devices)}
    if not cuda:
        sums[1] = step_checksum(dev)  # on the CPU: the same step twice must repeat exactly
    findings += checksum_findings(sums, ctx)
    if ddp is not None:
        findings += ddp_findings(ddp.results())
    else:
        skipped.append("DDP step: one GPU")
    metrics, perf = _performance(ctx, devices, cuda)
    findings += perf
    findings += [info(f"skipped: {s}", item="skip") for s in skipped]
    metrics.update(
        {"loss_fp32": [round(fp32["losses"][0], 4), round(fp32["losses"][-1], 4)], "torch": torch.__version__}
    )
    default = (
        f"fp32{'/fp16' if not any('fp16' in s for s in skipped) else ''}/bf16 training on "
        f"{len(devices)} {'GPU' if cuda else 'CPU'} device(s); {metrics['matmul_tflops_min']:.2f} TFLOP/s "
        f"{metrics['matmul_dtype']}"
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
    indices = [ctx.host.nvml_index(i) for i in range(len(devices))]  # CUDA order -> NVML index
    energy_before = _energy(indices) if cuda else {}
    per_device = {}
    dtype = "fp32"
    started = time.perf_counter()
    for i, d in enumerate(devices):
        per_device[i], dtype = matmul_tflops(d, cuda, ctx.level)
    energy_after = _energy(indices) if cuda else {}
    metrics: dict[str, Any] = {
        "matmul_tflops": {str(i): round(v, 3) for i, v in per_device.items()},
        "matmul_tflops_min": min(per_device.values()),
        "matmul_dtype": dtype,
    }
    joules = {}
    for i, before in energy_before.items():
        after = energy_after.get(i)
        if before is not None and after is not None:
            joules[i] = (after - before) / 1000
    if joules:  # from NVML's energy counter, around every GPU's matmul steps
        metrics["energy_per_step_j"] = {
            str(indices.index(i)): round(j / MATMUL_ITERS[cuda], 3) for i, j in joules.items()
        }
        metrics["matmul_seconds"] = round(time.perf_counter() - started, 3)
    if not cuda:
        return metrics, [info("CPU matmul throughput: no baseline", item="tflops")]
    baselines = load_baselines(_path(ctx.baseline))
    torch = common.torch_module()

    name = torch.cuda.get_device_name(0)
    expected = baselines.expected_tflops(name, dtype)
    if expected is None:
        return metrics, [info(f"no matmul baseline for {name}", item="tflops")]
    findings = []
    for i, v in per_device.items():
        verdict = baselines.judge(v, expected)
        text = f"{ctx.gpu_ref(i).label()}: {v:.0f} TFLOP/s {dtype} matmul vs {expected:.0f} expected"
        if verdict == "fail":
            findings.append(
                fail(
                    text,
                    "check clocks, power limits and cooling (nvidia-smi -q -d PERFORMANCE)",
                    action="drain",
                    item="tflops",
                    gpu=ctx.gpu_ref(i),
                )
            )
        elif verdict == "warn":
            findings.append(warn(text, "watch this GPU's clocks and temperature", item="tflops", gpu=ctx.gpu_ref(i)))
    return metrics, findings


def _energy(indices: list[int]) -> dict[int, int | None]:
    from gpuenv.adapters import nvml as adapter

    if adapter.init():
        return {}
    return adapter.energy_mj(indices)


def _path(value: str | None) -> Any:
    from pathlib import Path

    return Path(value) if value else None
