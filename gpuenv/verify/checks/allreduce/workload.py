"""What each rank of the allreduce check runs (`rank_workload`, started by name through
gpuenv.verify.ranks): every collective at every size, the pairs, the node collectives, the
localisation across nodes (its groups created first), one DDP step."""

from __future__ import annotations

from typing import Any

from gpuenv.verify.checks.allreduce.collectives import node_collectives, timed_collective
from gpuenv.verify.checks.allreduce.localise import localise, prepare
from gpuenv.verify.checks.allreduce.pairs import pair_allreduces
from gpuenv.verify.checks.amp import PlainSGD, model_for
from gpuenv.verify.workloads import common


def rank_workload(rank: int, world: int, device: str, params: dict[str, Any]) -> dict[str, Any]:
    import torch  # torch: heavy, needed in the rank processes only
    import torch.distributed as dist  # torch: heavy, needed in the rank processes only

    dev = torch.device("cuda", params.get("device_index", rank)) if device == "cuda" else torch.device("cpu")
    out: dict[str, Any] = {"rank": rank, "device": str(dev), "errors": [], "times": {}, "skipped": {}, "pairs": []}
    across = bool(params.get("rank_nodes"))
    if across:
        out["node"] = params["rank_nodes"][rank]
    prepared = prepare(params) if across else "one node"  # before any collective: new_group needs every rank
    for coll in params["collectives"]:
        for nbytes in params["sizes"]:
            try:
                times = timed_collective(coll, nbytes, rank, world, dev, params, out["errors"])
            except RuntimeError as exc:
                if "not supported" not in str(exc).lower() and "unsupported" not in str(exc).lower():
                    raise
                out["skipped"][coll] = str(exc).splitlines()[0]
                break
            out["times"][f"{coll}:{nbytes}"] = times
    if params.get("bisect"):
        out["pairs"] = pair_allreduces(rank, world, dev, params)
    if across:
        out["nodes"] = node_collectives(rank, dev, params, out["errors"])
        out["localisation"] = localise(prepared, rank, world, dev, params, out)
    if world >= 2:  # DDP rides on this job's process group: one NCCL initialisation for both
        out["ddp"] = ddp_step(rank, dev)
    dist.barrier()
    return out


def ddp_step(rank: int, dev: Any) -> dict[str, Any]:
    """One DDP step on this rank (different data per rank); parameters must agree afterwards."""
    torch = common.torch_module()
    from torch.nn.parallel import DistributedDataParallel  # torch: heavy, needed in the rank processes only

    model = model_for(dev)
    ddp = DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = PlainSGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64, 64, generator=gen).to(dev)
    y = torch.randint(0, 10, (64,), generator=gen).to(dev)
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
    opt.step()
    flat = torch.cat([p.detach().double().flatten().cpu() for p in model.parameters()])
    return {"checksum": f"{float(flat.sum()):.17g}", "finite": bool(torch.isfinite(flat).all())}
