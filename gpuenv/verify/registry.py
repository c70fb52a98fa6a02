"""Which checks run at which level, what each needs and provides, and under which time limit.

The engine orders the selected checks from what they declare: a check runs after the checks that
provide what it needs (facts the engine itself probes, `ENGINE_FACTS`, are there from the start),
and checks that need the GPUs free of other processes' CUDA contexts (`exclusive_gpus`: their work
runs in separate processes, as EXCLUSIVE_PROCESS compute mode allows one per GPU) run before the
checks that create a CUDA context in the long-lived worker (`context_in_worker`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from gpuenv.verify.catalogue import rules
from gpuenv.verify.model import HEALTH, LEVELS, Level

if TYPE_CHECKING:  # site checks are loaded only when a run enables them
    from gpuenv.verify.site.spec import SiteSpec

# What the engine knows before any check: HostFacts (GPUs NVML names, driver, PCI bus).
ENGINE_FACTS = frozenset({"host"})

# Names a user may give a check besides the one reports carry: the GPU health check reads NVML or AMD SMI
# alike and is called `health`; reports (schema /2), `--check nvml` and config files keep "nvml".
ALIASES: dict[str, str] = {"health": HEALTH}


@dataclass(frozen=True)
class CheckSpec:
    name: str
    first_level: Level  # the lowest level that runs it
    timeouts: tuple[float, float, float]  # seconds at quick, standard, deep
    needs_torch: bool
    about: str
    needs: tuple[str, ...] = ("host",)
    provides: tuple[str, ...] = ()
    exclusive_gpus: bool = False
    context_in_worker: bool = False

    origin = "gpuenv"  # where the check comes from (a site check names its entry point or program)

    def timeout(self, level: str) -> float:
        return self.timeouts[LEVELS.index(level)]  # type: ignore[arg-type]

    def runs_at(self, level: str) -> bool:
        return LEVELS.index(self.first_level) <= LEVELS.index(level)  # type: ignore[arg-type]


Spec = Union[CheckSpec, "SiteSpec"]  # a string inside: SiteSpec is only imported for typing

CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec(
        HEALTH,
        "quick",
        (30, 60, 180),  # deep: the load's start (30 s) and its heat-soak hold (nvml-policy.json: 60 s)
        False,
        "GPU health through NVML (AMD SMI on AMD GPUs): ECC, row remapping, PCIe link under load, clocks, "
        "thermals, NVLink/XGMI, fabric, XIDs",
        exclusive_gpus=True,
    ),
    CheckSpec(
        "stack",
        "quick",
        (60, 90, 120),
        True,
        "torch and its CUDA build vs the driver and the GPUs' architectures; cuDNN, NCCL, nvcc",
        provides=("stack",),
    ),
    CheckSpec(
        "allreduce",
        "quick",
        (90, 300, 600),
        True,
        "exact all-reduce across all GPUs (gloo on the CPU), one DDP step; algbw and busbw vs baseline",
        provides=("multi_node",),
        exclusive_gpus=True,
    ),
    CheckSpec(
        "models",
        "deep",
        (600, 600, 600),
        True,
        "ResNet-50-shaped DDP (images/s, scaling), BERT-base-shaped AMP + accumulation (tokens/s), "
        "sharded EmbeddingBag lookups (p50/p99 ms); energy per step",
        exclusive_gpus=True,
    ),
    CheckSpec(
        "amp",
        "quick",
        (90, 180, 300),
        True,
        "fp16/bf16 autocast training steps, GradScaler, per-GPU checksums, matmul TFLOP/s",
        context_in_worker=True,
    ),
    CheckSpec(
        "profiler",
        "quick",
        (60, 90, 180),
        True,
        "torch.profiler records CPU and CUDA activity (CUPTI works); deep: a memory timeline, nsys if installed",
        context_in_worker=True,
    ),
    CheckSpec(
        "compile",
        "standard",
        (300, 300, 420),
        True,
        "torch.compile of a small function matches eager; deep: its speedup on a transformer block",
        context_in_worker=True,
    ),
    CheckSpec(
        "conv",
        "standard",
        (120, 120, 180),
        True,
        "cuDNN convolution forward/backward (benchmark mode) matches a reference",
        context_in_worker=True,
    ),
    CheckSpec(
        "memory",
        "deep",
        (600, 600, 600),
        True,
        "free GPU memory written and read back; the NLP model's largest batch, checkpointing's saving, OOM recovery",
        context_in_worker=True,
    ),
    CheckSpec(
        "parallel",
        "deep",
        (180, 180, 180),
        True,
        "nn.DataParallel, a column-split tensor-parallel matmul and a layer-split model match one GPU",
        context_in_worker=True,
    ),
    CheckSpec(
        "fp8",
        "deep",
        (180, 180, 180),
        True,
        "e4m3 torch._scaled_mm vs bf16 and its TFLOP/s (sm_89+, gfx950; e4m3fnuz on gfx942); "
        "Transformer Engine fp8_autocast if installed",
        context_in_worker=True,
    ),
    CheckSpec(
        "onnx",
        "deep",
        (240, 240, 240),
        True,
        "torch.onnx.export of a small model run in ONNX Runtime matches PyTorch; latency",
        context_in_worker=True,
    ),
)


def select(level: str, names: tuple[str, ...], site: Sequence[SiteSpec] = ()) -> list[Spec]:
    """The checks of a level, or exactly the named ones, in the order they must run; `site`: the
    site checks the run enabled, after gpuenv's own where nothing else orders them."""
    every: list[Spec] = [*CHECKS, *site]
    chosen = [c for c in every if c.name in names] if names else [c for c in every if c.runs_at(level)]
    return order(chosen)


def order(specs: list[Spec]) -> list[Spec]:
    """Dependencies first; among the ready, GPU-exclusive work before worker contexts, then
    catalogue order. A need nothing selected provides is the engine's to meet (or unmet: the
    check reports it), never a reason to add a check."""
    provided_by = {fact: s.name for s in specs for fact in s.provides}
    done: set[str] = set()
    ordered: list[Spec] = []
    pending = list(specs)
    while pending:
        ready = [s for s in pending if all(_met(fact, s, provided_by, done) for fact in s.needs)]
        if not ready:
            raise ValueError(f"checks depend on each other in a cycle: {', '.join(s.name for s in pending)}")
        exclusive_waiting = any(s.exclusive_gpus for s in ready)
        pick = next((s for s in ready if not (s.context_in_worker and exclusive_waiting)), ready[0])
        ordered.append(pick)
        done.add(pick.name)
        pending.remove(pick)
    return ordered


def _met(fact: str, spec: Spec, provided_by: dict[str, str], done: set[str]) -> bool:
    source = provided_by.get(fact)
    return fact in ENGINE_FACTS or source is None or source == spec.name or source in done


# What each level aims for on an 8-GPU node: the Slurm prolog's, the epilog's and an acceptance run's budget.
LEVEL_TARGET_S: dict[Level, float] = {"quick": 30, "standard": 180, "deep": 900}


def levels_overview(site: Sequence[SiteSpec] = ()) -> list[dict[str, Any]]:
    """Per level: its target time, the checks it runs in order with each one's limit, what it proves,
    where it comes from and the finding codes it can report (from the catalogue; a site check's are
    its own, under site.NAME.): `gpuenv verify --list-checks`."""
    codes = sorted(rules())
    return [
        {
            "level": level,
            "target_s": LEVEL_TARGET_S[level],
            "worst_case_s": sum(spec.timeout(level) for spec in select(level, (), site)),
            "checks": [
                {
                    "name": spec.name,
                    "limit_s": spec.timeout(level),
                    "needs_torch": spec.needs_torch,
                    "proves": spec.about,
                    "origin": spec.origin,
                    "findings": [code for code in codes if code.split(".", 1)[0] == spec.name],
                }
                for spec in select(level, (), site)
            ],
        }
        for level in LEVELS
    ]
