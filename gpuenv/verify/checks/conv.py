"""conv: convolution forward/backward (cuDNN with benchmark=True on CUDA) against a float64 reference."""

from __future__ import annotations

from gpuenv.verify.catalogue import finding
from gpuenv.verify.context import CheckContext
from gpuenv.verify.model import CheckResult
from gpuenv.verify.workloads import common


def run(ctx: CheckContext) -> CheckResult:
    torch = common.torch_module()

    dev = common.workload_devices(ctx.device)[0]
    cudnn = torch.backends.cudnn
    saved = cudnn.benchmark
    cudnn.benchmark = True
    try:
        with common.full_fp32():
            torch.manual_seed(0)
            conv = torch.nn.Conv2d(16, 32, 3, padding=1)
            x = torch.randn(8, 16, 32, 32)
            ref_conv = torch.nn.Conv2d(16, 32, 3, padding=1).double()
            ref_conv.load_state_dict({k: v.double() for k, v in conv.state_dict().items()})
            x_ref = x.double().requires_grad_()
            ref_conv(x_ref).square().sum().backward()
            conv = conv.to(dev)
            x_dev = x.to(dev).requires_grad_()
            conv(x_dev).square().sum().backward()
            common.sync(dev)
            pairs = {"input grad": (x_dev.grad, x_ref.grad), "weight grad": (conv.weight.grad, ref_conv.weight.grad)}
            with torch.no_grad():
                pairs["forward"] = (conv(x.to(dev)), ref_conv(x.double()))
    finally:
        cudnn.benchmark = saved
    bad = [
        name
        for name, (got, want) in pairs.items()
        if not torch.allclose(got.double().cpu(), want, rtol=1e-3, atol=1e-3)
    ]
    if bad:
        message = f"convolution {', '.join(bad)} differ(s) from the float64 reference"
        return CheckResult("conv", "fail", summary=message, findings=[finding("conv.mismatch", message)])
    what = f"cuDNN {cudnn.version()}" if dev.type == "cuda" else "CPU"
    return CheckResult("conv", "pass", summary=f"conv2d forward/backward on {what} matches float64")
