"""compile: torch.compile of a small function matches eager (C compiler, Python headers, Triton)."""

from __future__ import annotations

from gpuenv.verify.checks import common
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, fail

REMEDY = (
    "install a C compiler and the Python headers (apt-get install build-essential python3-dev); "
    "on CUDA, the Triton that matches torch"
)


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
        return CheckResult(
            "compile", "fail", summary=message, findings=[fail(message, REMEDY, action="fix-config", item="compile")]
        )
    want = _fn(x)
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):  # type: ignore[arg-type]
        message = "torch.compile result differs from eager"
        return CheckResult(
            "compile",
            "fail",
            summary=message,
            findings=[fail(message, REMEDY, action="reinstall-stack", item="compile")],
        )
    return CheckResult("compile", "pass", summary=f"torch.compile on {dev.type} matches eager")
