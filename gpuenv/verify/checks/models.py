"""models (deep): three model-shaped training workloads on random data and random weights.

- CV: a ResNet-50-shaped net, channels_last, AMP and cudnn.benchmark, DDP across all GPUs with a
  DistributedSampler: images/s per GPU and in total, and the scaling efficiency (the total over
  the GPU count times one GPU alone).
- NLP: a BERT-base-shaped encoder with AMP and gradient accumulation: tokens/s per GPU, and k
  accumulated micro-batches giving the gradients of one batch k times larger.
- Recommender: EmbeddingBag tables sharded table-wise across the ranks: lookup batch p50/p99 against
  the 10 ms target, and queries/s.

Everything runs in the distributed ranks (one per GPU; gloo ranks on the CPU), each reading its own
GPU's energy around its timed steps. Figures are judged against the GPU model's baseline where
one exists, and per GPU against the node's median.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import math
import time
from typing import Any, NamedTuple

from gpuenv.platforms import nodes
from gpuenv.power.energy import EnergyMeter
from gpuenv.verify import ranks
from gpuenv.verify.catalogue import finding
from gpuenv.verify.context import CheckContext
from gpuenv.verify.expectations import load_expectations
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize
from gpuenv.verify.outliers import beyond_spread
from gpuenv.verify.workloads import common, cv, nlp, rec

ACCUMULATION_TOLERANCE = 1e-3  # relative gradient gap, fp32 without TF32: only summation order differs
STEPS = {
    "cpu": {"cv": 4, "cv_warmup": 1, "cv_compute": 2, "nlp": 2},
    "cuda": {"cv": 30, "cv_warmup": 8, "cv_compute": 10, "nlp": 10},
}
PER_GPU = (
    *("cv_images_per_s", "cv_compute_images_per_s", "nlp_tokens_per_s", "cv_step_j", "nlp_step_j", "rec_batch_j"),
    *("cv_images_per_j", "nlp_tokens_per_j"),
)
REC_WARMUP = 5  # untimed lookup batches first


def run(ctx: CheckContext) -> CheckResult:
    world = common.world_size(ctx.device, ctx.cpu_ranks)
    cuda = ctx.device == "cuda"
    params = {
        "level": ctx.level,
        "indices": [ctx.host.nvml_index(i) for i in range(world)] if cuda else [],
        "smi": ctx.host.smi,
    }
    started = time.perf_counter()
    results = ranks.launch(
        "gpuenv.verify.checks.models:rank_workload", check="models", world=world, device=ctx.device, params=params
    )
    metrics, detail = collect(results, world=world)
    refs = [ctx.gpu_ref(i) for i in range(world)]
    findings = evaluate(metrics, detail, cuda=cuda, world=world, refs=refs, spread=load_expectations().spread)
    if cuda:
        findings += baseline_findings(common.judge_figures("models", metrics, ctx, gpus=world), ctx)
    else:
        detail["energy"] = "not measured on the CPU: NVML reads GPUs only"
        findings.append(finding("models.cpu-not-judged", "CPU figures: recorded, not judged (no baseline)"))
    detail["seconds"] = round(time.perf_counter() - started, 1)
    default = (
        f"{metrics['cv_images_per_s_total']:.0f} images/s (CV), "
        f"{sum(metrics['nlp_tokens_per_s'].values()):.0f} tokens/s (NLP), "
        f"rec p99 {metrics['rec_p99_ms']:.2f} ms on {world} {'GPU' if cuda else 'CPU rank'}(s)"
    )
    return CheckResult(
        "models",
        status_from_findings(findings),
        summary=summarize(findings, default),
        metrics=metrics,
        findings=findings,
        detail=detail,
    )


def collect(results: list[dict[str, Any]], *, world: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Pure: the ranks' results as the check's metrics (per GPU by rank, node totals) and detail."""
    lead = results[0]
    metrics: dict[str, Any] = {}
    for key in PER_GPU:
        values = {str(r): res[key] for r, res in enumerate(results) if res.get(key) is not None}
        if values:
            metrics[key] = values
    total = sum(res["cv_images_per_s"] for res in results)
    metrics["cv_images_per_s_total"] = round(total, 2)
    solo = lead.get("cv_solo_images_per_s")
    if world > 1 and solo:
        metrics["cv_scaling_efficiency"] = round(total / (world * solo), 3)
    latencies = sorted(lead["rec_ms"])
    metrics["rec_p50_ms"] = round(percentile(latencies, 50), 3)
    metrics["rec_p99_ms"] = round(percentile(latencies, 99), 3)
    metrics["rec_queries_per_s"] = round(lead["rec_queries"] / (sum(latencies) / 1000), 1)
    batch_j = [res["rec_batch_j"] for res in results if res.get("rec_batch_j")]
    if len(batch_j) == len(results):  # every GPU serves each query: per joule of the node's GPUs together
        metrics["rec_queries_per_j"] = round(lead["rec_shape"]["batch"] / sum(batch_j), 3)
    detail = {
        "cv": lead["cv_shape"],
        "nlp": lead["nlp_shape"],
        "rec": lead["rec_shape"],
        "accumulation_gap": lead["accumulation_gap"],
        "sampler": lead["sampler"],
        "rec_checksums": [res["rec_checksum"] for res in results],
        "losses_finite": all(res["losses_finite"] for res in results),
        "energy_source": sorted({res["energy_source"] for res in results if res.get("energy_source")}),
    }
    return metrics, detail


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def evaluate(
    metrics: dict[str, Any],
    detail: dict[str, Any],
    *,
    cuda: bool,
    world: int,
    refs: list[Any],
    spread: float = 0.75,
) -> list[Finding]:
    """Pure: the correctness proofs hold, the recommender meets its target on a GPU, no GPU's
    own compute is beyond the node's spread (on GPUs only: CPU speeds are reported, not judged)."""
    out: list[Finding] = []
    if not detail["losses_finite"]:
        out.append(finding("models.non-finite", "a CV or NLP training loss went non-finite"))
    gap = detail["accumulation_gap"]
    if not gap <= ACCUMULATION_TOLERANCE:
        message = (
            f"NLP: {detail['nlp']['accumulate']} accumulated micro-batches give gradients {gap:.2e} "
            f"(relative) away from one batch of the same sequences (tolerance {ACCUMULATION_TOLERANCE:g})"
        )
        out.append(finding("models.accumulation-mismatch", message))
    if not detail["sampler"]["disjoint"]:
        message = f"CV: the DistributedSampler's shards overlap or miss samples ({detail['sampler']})"
        out.append(finding("models.sampler-overlap", message))
    if len(set(detail["rec_checksums"])) > 1:
        message = f"recommender: the ranks scored different results from the sharded tables {detail['rec_checksums']}"
        out.append(finding("models.rec-shards-disagree", message))
    p99 = metrics["rec_p99_ms"]
    if cuda and p99 > rec.TARGET_MS:
        message = f"recommender: lookup batch p99 {p99:.2f} ms over the {rec.TARGET_MS:g} ms target"
        out.append(finding("models.rec-latency-high", message))
    if cuda:
        for key in ("cv_compute_images_per_s", "nlp_tokens_per_s"):  # each rank's own work, no collective
            out += outliers(metrics.get(key, {}), key, refs, spread=spread)
    return out


def baseline_findings(verdicts: list[common.FigureVerdict], ctx: CheckContext) -> list[Finding]:
    """Pure: each figure against its GPU model's expected value; one line for those with none."""
    out: list[Finding] = []
    for v in verdicts:
        gpu = ctx.gpu_ref(v.gpu_index) if v.gpu_index is not None else None
        if v.verdict == "fail":
            out.append(finding("models.figure-low", v.text(gpu), gpu=gpu))
        elif v.verdict == "warn":
            out.append(finding("models.figure-under-expected", v.text(gpu), gpu=gpu))
    missing = sorted({v.figure for v in verdicts if v.expected is None})
    if missing:
        message = f"no baseline for {', '.join(missing)} on {verdicts[0].gpu_name}: figures recorded, not judged"
        out.append(finding("models.no-baseline", message))
    return out


def outliers(per_gpu: dict[str, float], key: str, refs: list[Any], *, spread: float) -> list[Finding]:
    """Pure: a GPU whose own compute is under the spread x the node's median is throttled or faulty.
    (Under DDP every rank's images/s is the slowest rank's: the figures judged are each rank's
    steps without the gradient allreduce, and the NLP model, which runs on each GPU alone.)"""
    return [
        finding(
            "models.gpu-outlier",
            f"{refs[int(o.member)].label()}: {key} {o.value:.0f}, {o.share:.0%} of the node's median "
            f"{o.reference:.0f} (under {spread:.0%})",
            gpu=refs[int(o.member)],
        )
        for o in beyond_spread(per_gpu, spread=spread)
    ]


class Metered(NamedTuple):
    """A rank's GPU as its energy is read: its index in the management library's order (`position`),
    and the library's wire name."""

    position: int
    smi: str


def rank_workload(rank: int, world: int, device: str, params: dict[str, Any]) -> dict[str, Any]:
    torch = common.torch_module()

    dev = torch.device("cuda", rank) if device == "cuda" else torch.device("cpu")
    index = params["indices"][rank] if params["indices"] else None  # the management library's index of this rank's GPU
    gpu = None if index is None else Metered(index, params["smi"])
    steps = STEPS[device]
    out: dict[str, Any] = {}
    out.update(_cv(rank, world, dev, params["level"], steps, gpu))
    out.update(_nlp(rank, dev, params["level"], steps, gpu))
    out.update(_rec(rank, world, dev, params["level"], gpu))
    return out


def _meter(gpu: Metered | None) -> Any:
    return EnergyMeter(gpu.position, nodes.for_smi(gpu.smi)) if gpu is not None else contextlib.nullcontext()


def _cv(rank: int, world: int, dev: Any, level: str, steps: dict[str, int], gpu: Metered | None) -> dict[str, Any]:
    torch = common.torch_module()
    dist = torch.distributed

    size = cv.size_for(dev.type, level)
    torch.backends.cudnn.benchmark = True
    out: dict[str, Any] = {"cv_shape": dataclasses.asdict(size) | {"torchvision": _has_torchvision()}}
    if world > 1 and rank == 0:  # one GPU alone first: the denominator of the scaling efficiency
        images, seconds, _ = _cv_train(size, dev, steps, ddp=False, rank=0, world=1)
        out["cv_solo_images_per_s"] = images / seconds
    dist.barrier()
    meter = _meter(gpu)
    images, seconds, sampler = _cv_train(size, dev, steps, ddp=True, rank=rank, world=world, meter=meter)
    out["cv_images_per_s"] = round(images / seconds, 2)
    out["cv_compute_images_per_s"] = sampler.pop("compute_images_per_s", None)
    out["losses_finite"] = sampler.pop("finite")
    out["sampler"] = sampler
    _energy_figures(out, meter, "cv_step_j", "cv_images_per_j", steps=steps["cv"], work=images)
    return out


PER_EPOCH = 4  # steps per pass over the image pool


class CvTraining:
    """One rank's CV training: the model (under DDP when asked), the image pool, its
    DistributedSampler, the optimizer and AMP's scaler where fp16 needs one."""

    def __init__(self, size: cv.CvSize, dev: Any, *, ddp: bool, rank: int, world: int) -> None:
        torch = common.torch_module()

        self.size, self.dev, self.torch = size, dev, torch
        model = cv.build(size, dev)
        ids = [dev.index] if dev.type == "cuda" else None
        self.model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids) if ddp else model
        self.x, self.y = cv.pool(size, dev, images=size.batch * world * PER_EPOCH)
        self.sampler = torch.utils.data.DistributedSampler(
            range(len(self.x)), num_replicas=world, rank=rank, shuffle=True, seed=0
        )
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.precision = nlp.precision_for(dev)
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "float16" else None
        self.order: Any = None
        self.losses: list[Any] = []  # kept on the device: checking each one would sync every step

    def step(self, k: int) -> None:
        torch = self.torch
        if k % PER_EPOCH == 0:
            self.sampler.set_epoch(k // PER_EPOCH)
            self.order = torch.tensor(list(self.sampler), device=self.dev)
        idx = self.order[(k % PER_EPOCH) * self.size.batch :][: self.size.batch]
        autocast = (
            torch.autocast(self.dev.type, dtype=getattr(torch, self.precision))
            if self.precision != "fp32"
            else contextlib.nullcontext()
        )
        with autocast:
            loss = torch.nn.functional.cross_entropy(self.model(self.x[idx]).float(), self.y[idx])
        self.opt.zero_grad(set_to_none=True)
        (self.scaler.scale(loss) if self.scaler else loss).backward()
        if self.scaler:
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            self.opt.step()
        self.losses.append(loss.detach())

    def finite(self) -> bool:
        return bool(self.torch.isfinite(self.torch.stack(self.losses)).all())


def _cv_train(
    size: cv.CvSize, dev: Any, steps: dict[str, int], *, ddp: bool, rank: int, world: int, meter: Any = None
) -> tuple[int, float, dict[str, Any]]:
    """(images, seconds) over the timed steps, and what the sampler handed out in one epoch."""
    run = CvTraining(size, dev, ddp=ddp, rank=rank, world=world)
    for k in range(steps["cv_warmup"]):
        run.step(k)
    common.sync(dev)
    with meter or contextlib.nullcontext():
        started = time.perf_counter()
        for k in range(steps["cv"]):
            run.step(k)
        common.sync(dev)
        seconds = time.perf_counter() - started
    sampled = _sampler_share(run.sampler, len(run.x), world, dev) if ddp else {}
    if ddp:
        sampled["compute_images_per_s"] = _own_compute(run, dev, steps["cv_compute"])
    sampled["finite"] = run.finite()
    return size.batch * steps["cv"], seconds, sampled


def _own_compute(run: CvTraining, dev: Any, steps: int) -> float:
    """This rank's images/s with DDP's gradient allreduce switched off (`no_sync`): its own compute,
    which under DDP the slowest rank sets for every rank. All ranks start together."""
    common.torch_module().distributed.barrier()
    with run.model.no_sync():
        started = time.perf_counter()
        for k in range(steps):
            run.step(k)
        common.sync(dev)
    return round(run.size.batch * steps / (time.perf_counter() - started), 2)


def _sampler_share(sampler: Any, pool: int, world: int, dev: Any) -> dict[str, Any]:
    """Whether one epoch's shards, gathered from every rank, cover the pool exactly once."""
    torch = common.torch_module()

    sampler.set_epoch(0)
    mine = torch.tensor(list(sampler), device=dev)
    shards = [torch.empty_like(mine) for _ in range(world)]
    torch.distributed.all_gather(shards, mine)
    seen = torch.cat(shards).cpu().tolist()
    return {"pool": pool, "sampled": len(seen), "disjoint": sorted(seen) == list(range(pool))}


def _has_torchvision() -> bool:
    return importlib.util.find_spec("torchvision") is not None


def _energy_figures(
    out: dict[str, Any], meter: Any, step_key: str, per_j_key: str | None, *, steps: int, work: int
) -> None:
    """Joules per step on this GPU and its work per joule (per_j_key None: the node's, in collect)."""
    joules = getattr(meter, "joules", None)
    if joules is None:
        if isinstance(meter, EnergyMeter):
            out["energy_source"] = meter.source
        return
    out[step_key] = round(joules / steps, 3)
    if per_j_key is not None:
        out[per_j_key] = round(work / joules, 3) if joules > 0 else None
    out["energy_source"] = meter.source


def _nlp(rank: int, dev: Any, level: str, steps: dict[str, int], gpu: Metered | None) -> dict[str, Any]:
    size = nlp.size_for(dev.type, level)
    meter = _meter(gpu)
    result = nlp.throughput(str(dev), size=size, steps=steps["nlp"], around=meter)
    out: dict[str, Any] = {
        "nlp_tokens_per_s": round(result.tokens_per_s, 2),
        "nlp_shape": dataclasses.asdict(size) | {"precision": result.precision},
        "accumulation_gap": nlp.accumulation_gap(str(dev), size=size) if rank == 0 else None,
    }
    _energy_figures(out, meter, "nlp_step_j", "nlp_tokens_per_j", steps=steps["nlp"], work=result.tokens)
    return out


def _rec(rank: int, world: int, dev: Any, level: str, gpu: Metered | None) -> dict[str, Any]:
    """Timed lookup batches over the sharded tables; rank 0's clock (every batch ends in an
    all-gather, so all ranks finish a batch together), each GPU's energy around them."""
    torch = common.torch_module()
    dist = torch.distributed

    size = rec.size_for(dev.type, level)
    mine = rec.shard(size, rank, world)
    tables = rec.build_shard(size, mine, dev)
    top = rec.tower(size, dev)
    slots = math.ceil(size.tables / world)

    # Every batch's ids made and copied to the GPU before the clock starts: host-side randint and
    # the H2D copy are the data loader's time, not the lookup's.
    queries = [rec.query_ids(size, step, dev) for step in range(REC_WARMUP + size.batches)]
    offsets = torch.arange(0, size.batch * size.bag, size.bag, device=dev)
    common.sync(dev)

    def batch(step: int) -> Any:
        ids = queries[step]
        local = torch.zeros(slots, size.batch, size.dim, device=dev)
        for slot, t in enumerate(mine):
            local[slot] = tables[slot](ids[t], offsets)
        gathered = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(gathered, local)
        pooled = [gathered[t % world][t // world] for t in range(size.tables)]
        scores = top(torch.cat(pooled, dim=1))
        common.sync(dev)
        return scores

    latencies: list[float] = []
    checksum = 0.0
    meter = _meter(gpu)
    with torch.no_grad():
        for step in range(REC_WARMUP):
            batch(step)
        with meter:
            for step in range(REC_WARMUP, REC_WARMUP + size.batches):
                started = time.perf_counter()
                scores = batch(step)
                latencies.append((time.perf_counter() - started) * 1000)
                checksum += float(scores.double().sum())
    out: dict[str, Any] = {}
    _energy_figures(out, meter, "rec_batch_j", None, steps=size.batches, work=size.batch * size.batches)
    return out | {
        "rec_ms": latencies,
        "rec_queries": size.batch * size.batches,
        "rec_checksum": f"{checksum:.6e}",
        "rec_shape": dataclasses.asdict(size)
        | {"tables_per_rank": [len(rec.shard(size, r, world)) for r in range(world)]},
    }
