"""The platforms gpuenv serves — CUDA, ROCm and CPU — behind one seam (docs/architecture.md).

- `base`: the Platform Protocol and its halves (resolve, image, host), and the values they share;
- `arch`: a CPU architecture turned into facts once;
- `registry`: the platforms by (platform, CPU architecture), and the only dispatch: `for_request`,
  `for_stack`, `for_host`;
- `cuda/`, `rocm/`, `cpu/`: one package per platform, a module per half.

This package's own import runs nothing: the commands import gpuenv.platforms.registry.
"""
