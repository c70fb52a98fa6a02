"""ROCm's tables of the knowledge base (`gpuenv matrix --rocm`) — each ROCm release torch has wheels for
(AMD's OS support, its rocm/dev images, the torch releases built for it) and each AMD GPU (its gfx target,
the first ROCm that supports it, its PCI ids). Pure."""

from __future__ import annotations

from gpuenv.kb import KnowledgeBase, V

ROCM_COLUMNS = ("ROCm", "build", "images tag", "OS (AMD's matrix)", "rocm/dev images", "torch", "unconfirmed")
AMD_GPU_COLUMNS = ("GPU", "gfx", "from ROCm", "PCI ids (1002:)", "torch builds with its kernels")


def rocm_rows(kb: KnowledgeBase) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for r in kb.rocm:
        torches = [t.torch for t in kb.torch_rocm if r.build in t.arch]
        span = f"{torches[0]}–{torches[-1]}" if len(torches) > 1 else (torches[0] if torches else "—")
        unconfirmed = ", ".join(r.provenance.unconfirmed)
        rows.append((r.version, r.build, r.release, " ".join(r.os), " ".join(r.images), span, unconfirmed))
    return rows


def amd_gpu_rows(kb: KnowledgeBase) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for g in kb.amd_gpus:
        builds = [
            f"{t.torch}+{b}"
            for t in kb.torch_rocm
            for b, code in t.arch.items()
            if g.gfx in code and (g.min_rocm is None or V(kb.rocm_by_build[b].version) >= V(g.min_rocm))
        ]
        span = f"{builds[0]} … {builds[-1]}" if builds else "—"
        rows.append((g.name, g.gfx, g.min_rocm or "any", " ".join(g.pci_ids) or "—", span))
    return rows
