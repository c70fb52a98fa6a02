"""parallel (deep): the single-process ways of spreading a model over GPUs give one GPU's result.

- nn.DataParallel (as the guide's example uses it) over all GPUs: forward and gradients match the
  module on one GPU.
- A column-split tensor-parallel matmul over 2 GPUs (each holds half the weight's columns, the
  halves are concatenated): matches the whole matmul on one GPU.
- A layer-split model-parallel model over 2 GPUs (the first half of the layers on one, the rest on
  the other, activations moved between them): forward and gradients match one GPU.

On the CPU the split arithmetic runs with both halves on the CPU (DataParallel and the transfers
between devices are not checked, and that is said); a GPU node with one GPU skips what needs two.
"""

from __future__ import annotations

from typing import Any

from gpuenv.verify.catalogue import finding
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult, Finding, status_from_findings, summarize
from gpuenv.verify.workloads import common

TOLERANCE = 1e-4  # relative, full fp32 (no TF32): only summation order differs


def evaluate(gaps: dict[str, float]) -> list[Finding]:
    """Pure: every part's relative gap to the one-device result is within TOLERANCE."""
    rules = {
        "dataparallel": "parallel.dataparallel-mismatch",
        "tensor": "parallel.tensor-mismatch",
        "pipeline": "parallel.pipeline-mismatch",
    }
    out = []
    for part, gap in gaps.items():
        if not gap <= TOLERANCE:
            message = f"{part} parallel differs from one device by {gap:.2e} (relative; tolerance {TOLERANCE:g})"
            if rules[part] == "parallel.dataparallel-mismatch":
                out.append(finding("parallel.dataparallel-mismatch", message))
            elif rules[part] == "parallel.tensor-mismatch":
                out.append(finding("parallel.tensor-mismatch", message))
            else:
                out.append(finding("parallel.pipeline-mismatch", message))
    return out


def relative_gap(got: list[Any], want: list[Any]) -> float:
    """The largest of |got - want| / |want| (norms) over pairs of tensors, compared on the CPU."""
    gaps = [
        float((g.detach().double().cpu() - w.detach().double().cpu()).norm())
        / max(float(w.detach().double().cpu().norm()), 1e-12)
        for g, w in zip(got, want, strict=True)
    ]
    return max(gaps)


def _mlp(device: Any) -> Any:
    torch = common.torch_module()

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(256, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    ).to(device)


def _inputs(device: Any, rows: int = 64) -> Any:
    torch = common.torch_module()

    return torch.randn(rows, 256, generator=torch.Generator().manual_seed(1)).to(device)


def _forward_backward(model: Any, x: Any) -> list[Any]:
    out = model(x)
    out.square().mean().backward()
    return [out, *(p.grad for p in model.parameters())]


def dataparallel_gap(devices: list[Any]) -> float:
    torch = common.torch_module()

    want = _forward_backward(_mlp(devices[0]), _inputs(devices[0]))
    parallel = torch.nn.DataParallel(_mlp(devices[0]), device_ids=[d.index for d in devices])
    got = _forward_backward(parallel, _inputs(devices[0]))
    return relative_gap(got, want)


def tensor_gap(first: Any, second: Any) -> float:
    """y = x @ W, with W's columns split over two devices and the halves concatenated on the first."""
    torch = common.torch_module()

    gen = torch.Generator().manual_seed(2)
    x, w = torch.randn(256, 1024, generator=gen), torch.randn(1024, 2048, generator=gen)
    want = x.to(first) @ w.to(first)
    left, right = w[:, :1024], w[:, 1024:]
    got = torch.cat([x.to(first) @ left.to(first), (x.to(second) @ right.to(second)).to(first)], dim=1)
    return relative_gap([got], [want])


def pipeline_gap(first: Any, second: Any) -> float:
    """The MLP's first layers on one device, the rest on the other: forward and every gradient."""
    torch = common.torch_module()

    want = _forward_backward(_mlp(first), _inputs(first))
    model = _mlp("cpu")
    head, tail = model[:3].to(first), model[3:].to(second)

    class Split(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.head, self.tail = head, tail

        def forward(self, x: Any) -> Any:
            return self.tail(self.head(x).to(second)).to(first)

    got = _forward_backward(Split(), _inputs(first))
    return relative_gap(got, want)


def run(ctx: CheckContext) -> CheckResult:
    devices = common.workload_devices(ctx.device)
    cuda = ctx.device == "cuda"
    skipped: list[str] = []
    gaps: dict[str, float] = {}
    with common.full_fp32():
        if cuda and len(devices) >= 2:
            gaps["dataparallel"] = dataparallel_gap(devices)
            gaps["tensor"] = tensor_gap(devices[0], devices[1])
            gaps["pipeline"] = pipeline_gap(devices[0], devices[1])
        elif cuda:
            skipped.append("DataParallel, tensor and model parallel need 2 GPUs; this node has 1")
        else:
            skipped.append(
                "DataParallel and transfers between devices: CPU only (the splits ran with both halves on the CPU)"
            )
            gaps["tensor"] = tensor_gap(devices[0], devices[0])
            gaps["pipeline"] = pipeline_gap(devices[0], devices[0])
    findings = evaluate(gaps) + [finding("parallel.not-checked", f"not checked: {s}") for s in skipped]
    if not gaps:
        return CheckResult("parallel", "skip", summary=skipped[0], findings=findings, detail={"skipped": skipped})
    where = f"{len(devices)} GPUs" if cuda else "the CPU"
    default = f"{', '.join(gaps)} parallel match one device on {where} (max gap {max(gaps.values()):.1e})"
    return CheckResult(
        "parallel",
        status_from_findings(findings),
        summary=summarize(findings, default),
        metrics={"gaps": {k: float(f"{v:.3e}") for k, v in gaps.items()}, "devices": len(devices)},
        findings=findings,
        detail={"skipped": skipped},
    )
