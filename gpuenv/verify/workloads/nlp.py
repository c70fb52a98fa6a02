"""A BERT-base-shaped encoder (12 layers, 768 hidden, 12 heads) trained on random tokens with AMP
and gradient accumulation: tokens per second, and whether k accumulated micro-batches give the
gradients of one batch k times larger. Random weights and data, nothing downloaded.

Reused outside verify (`gpuenv tune power` measures tokens/s per watt with it): `size_for` and
`throughput` are the stable entry points; torch is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

from gpuenv.verify.workloads import common


@dataclass(frozen=True)
class NlpSize:
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    seq_len: int
    micro_batch: int  # sequences per forward/backward
    accumulate: int  # micro-batches per optimizer step

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.micro_batch * self.accumulate


BERT_BASE = NlpSize(layers=12, hidden=768, heads=12, ffn=3072, vocab=30522, seq_len=128, micro_batch=32, accumulate=2)
# On the CPU the same architecture, shrunk so a few steps take well under a second each.
CPU_SIZE = NlpSize(layers=2, hidden=128, heads=4, ffn=512, vocab=1000, seq_len=32, micro_batch=4, accumulate=2)


@dataclass(frozen=True)
class NlpThroughput:
    tokens: int
    seconds: float
    tokens_per_s: float
    steps: int
    precision: str  # the autocast dtype, or "fp32"


def size_for(device: str, level: str) -> NlpSize:
    """BERT-base on a GPU (a smaller batch below the deep level), the shrunk model on the CPU."""
    if device.startswith("cpu"):
        return CPU_SIZE
    return BERT_BASE if level == "deep" else replace(BERT_BASE, micro_batch=16, accumulate=1)


def build(size: NlpSize, device: Any) -> Any:
    """The encoder with a tied masked-LM head, in float32 (autocast lowers what it should)."""
    torch = common.torch_module()
    nn = torch.nn

    class Encoder(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(size.vocab, size.hidden)
            self.position = nn.Embedding(size.seq_len, size.hidden)
            self.norm = nn.LayerNorm(size.hidden)
            layer = nn.TransformerEncoderLayer(
                size.hidden, size.heads, size.ffn, dropout=0.0, activation="gelu", batch_first=True
            )
            self.layers = nn.TransformerEncoder(layer, size.layers, enable_nested_tensor=False)

        def forward(self, tokens: Any) -> Any:
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            hidden = self.layers(self.norm(self.embed(tokens) + self.position(positions)))
            return hidden @ self.embed.weight.t()

    torch.manual_seed(0)
    return Encoder().to(device)


def batch(size: NlpSize, device: Any, *, sequences: int, seed: int = 1) -> tuple[Any, Any]:
    """Random token ids and random targets (a masked-LM loss on every position)."""
    torch = common.torch_module()

    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, size.vocab, (sequences, size.seq_len), generator=gen)
    targets = torch.randint(0, size.vocab, (sequences, size.seq_len), generator=gen)
    return tokens.to(device), targets.to(device)


def loss_of(model: Any, tokens: Any, targets: Any) -> Any:
    torch = common.torch_module()

    logits = model(tokens)
    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def precision_for(device: Any) -> str:
    """bf16 autocast where the GPU has it, else fp16 (with a GradScaler); fp32 on the CPU (its
    autocast is slower than fp32 on most CPUs, and the CPU figures are plumbing, not speed)."""
    torch = common.torch_module()

    if device.type != "cuda":
        return "fp32"
    return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"


def train_steps(model: Any, size: NlpSize, device: Any, *, steps: int, precision: str) -> None:
    """`steps` optimizer steps, each over `size.accumulate` micro-batches."""
    torch = common.torch_module()

    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda") if precision == "float16" else None
    tokens, targets = batch(size, device, sequences=size.micro_batch * size.accumulate)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        for part in range(size.accumulate):
            rows = slice(part * size.micro_batch, (part + 1) * size.micro_batch)
            autocast = (
                torch.autocast(device.type, dtype=getattr(torch, precision))
                if precision != "fp32"
                else contextlib.nullcontext()
            )
            with autocast:
                loss = loss_of(model, tokens[rows], targets[rows]) / size.accumulate
            (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()


def throughput(
    device: str, *, size: NlpSize, steps: int, around: AbstractContextManager[Any] | None = None
) -> NlpThroughput:
    """Training tokens per second on one device ("cuda", "cuda:1", "cpu"): one untimed warm-up
    step (allocator, cuDNN/cuBLAS heuristics, clocks), then `steps` timed optimizer steps, inside
    `around` when given (an energy meter reads exactly the timed steps)."""
    torch = common.torch_module()

    dev = torch.device(device)
    precision = precision_for(dev)
    model = build(size, dev)
    train_steps(model, size, dev, steps=1, precision=precision)
    common.sync(dev)
    with around or contextlib.nullcontext():
        started = time.perf_counter()
        train_steps(model, size, dev, steps=steps, precision=precision)
        common.sync(dev)
        seconds = time.perf_counter() - started
    tokens = size.tokens_per_step * steps
    return NlpThroughput(tokens, seconds, tokens / seconds, steps, precision)


def accumulation_gap(device: str, *, size: NlpSize) -> float:
    """The largest relative difference (per parameter, norm of the difference over the norm of the
    reference) between the gradients of `accumulate` micro-batches and of one batch of the same
    sequences, in full fp32 (no TF32) so only the summation order differs."""
    torch = common.torch_module()

    dev = torch.device(device)
    whole = size.micro_batch * size.accumulate
    tokens, targets = batch(size, dev, sequences=whole, seed=2)
    grads = []
    with common.full_fp32():
        for parts in (1, size.accumulate):
            model = build(size, dev)
            rows = whole // parts
            for part in range(parts):
                sl = slice(part * rows, (part + 1) * rows)
                (loss_of(model, tokens[sl], targets[sl]) / parts).backward()
            grads.append([p.grad.detach().double() for p in model.parameters()])
    gaps = [float((a - b).norm() / max(float(b.norm()), 1e-12)) for a, b in zip(*grads, strict=True)]
    return max(gaps)
