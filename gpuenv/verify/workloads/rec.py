"""A recommender's sparse half: EmbeddingBag tables sharded table-wise across the ranks (model
parallel, as TorchRec's table-wise sharding does), each query batch looked up on every rank's
tables, the pooled vectors all-gathered and scored by a small dense tower."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuenv.verify.workloads import common

TARGET_MS = 10.0  # the latency a lookup batch must stay under (p99)


@dataclass(frozen=True)
class RecSize:
    tables: int
    rows: int  # per table
    dim: int
    bag: int  # ids pooled per table per query
    batch: int  # queries per lookup batch
    batches: int  # timed lookup batches


GPU_SIZE = RecSize(tables=8, rows=1_000_000, dim=128, bag=20, batch=2048, batches=200)
CPU_SIZE = RecSize(tables=4, rows=20_000, dim=32, bag=8, batch=128, batches=40)


def size_for(device: str, level: str) -> RecSize:
    return CPU_SIZE if device.startswith("cpu") else GPU_SIZE


def shard(size: RecSize, rank: int, world: int) -> list[int]:
    """The tables this rank holds: round-robin, so every rank holds some when tables >= world."""
    return [t for t in range(size.tables) if t % world == rank]


def build_shard(size: RecSize, tables: list[int], device: Any) -> Any:
    """This rank's tables, each seeded by its table number (the same weights on any world size)."""
    torch = common.torch_module()

    bags = []
    for t in tables:
        torch.manual_seed(100 + t)
        bags.append(torch.nn.EmbeddingBag(size.rows, size.dim, mode="sum").to(device))
    return torch.nn.ModuleList(bags)


def tower(size: RecSize, device: Any) -> Any:
    torch = common.torch_module()

    torch.manual_seed(7)
    return torch.nn.Sequential(
        torch.nn.Linear(size.tables * size.dim, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)
    ).to(device)


def query_ids(size: RecSize, step: int, device: Any) -> Any:
    """[tables, batch * bag] ids of one lookup batch, the same on every rank (seeded by the step)."""
    torch = common.torch_module()

    gen = torch.Generator().manual_seed(10_000 + step)
    return torch.randint(0, size.rows, (size.tables, size.batch * size.bag), generator=gen).to(device)
