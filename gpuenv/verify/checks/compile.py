"""compile: torch.compile of a small function matches eager (C compiler, Python headers, Triton)."""

from __future__ import annotations

from gpuenv.verify.catalogue import finding
from gpuenv.verify.checks import common
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult


def _fn(x: object) -> object:
    import torch

    assert isinstance(x, torch.Tensor)
    return torch.sin(x) * x + torch.relu(x - 0.5) ** 2


def run(ctx: CheckContext) -> CheckResult:
    import torch

    if not hasattr(torch, "compile"):
        return CheckResult("compile", "skip", summary=f"torch {torch.__version__} has no torch.compile")
    dev = common.workload_devices(ctx.device)[0]
    x = torch.randn(4096, device=dev)
    try:
        compiled = torch.compile(_fn)
        got = compiled(x)
    except Exception as exc:  # the compile failing is the finding, not a crash
        message = f"torch.compile failed: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"
        return CheckResult("compile", "fail", summary=message, findings=[finding("compile.failed", message)])
    want = _fn(x)
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):  # type: ignore[arg-type]
        message = "torch.compile result differs from eager"
        return CheckResult(
            "compile",
            "fail",
            summary=message,
            findings=[finding("compile.mismatch", message)],
        )
    return CheckResult("compile", "pass", summary=f"torch.compile on {dev.type} matches eager")
