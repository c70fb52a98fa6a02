"""A ResNet-50-shaped image classifier (torchvision's when installed, else the same bottleneck
architecture built here) trained with channels_last, AMP and cudnn.benchmark on random images.

The images are a pool made once on the device; a DistributedSampler picks each rank's share of
the pool's indices per step, as it would pick files from a dataset, without a CPU data pipeline
that would measure the loader instead of the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

from gpuenv.verify.workloads import common


@dataclass(frozen=True)
class CvSize:
    width: int  # channels of the stem; ResNet-50 has 64
    blocks: tuple[int, int, int, int]  # bottleneck blocks per stage; ResNet-50 has (3, 4, 6, 3)
    image: int  # pixels per side
    batch: int  # images per GPU per step
    classes: int

    @property
    def is_resnet50(self) -> bool:
        return self.width == 64 and self.blocks == (3, 4, 6, 3)


RESNET50 = CvSize(width=64, blocks=(3, 4, 6, 3), image=224, batch=64, classes=1000)
CPU_SIZE = CvSize(width=8, blocks=(1, 1, 1, 1), image=32, batch=8, classes=10)


def size_for(device: str, level: str) -> CvSize:
    return CPU_SIZE if device.startswith("cpu") else RESNET50


def build(size: CvSize, device: Any) -> Any:
    torch = common.torch_module()

    torch.manual_seed(0)
    if size.is_resnet50:
        try:
            resnet50 = import_module("torchvision.models").resnet50
            return resnet50(weights=None, num_classes=size.classes).to(device, memory_format=torch.channels_last)
        except ImportError:
            pass
    return _resnet(size).to(device, memory_format=torch.channels_last)


def _resnet(size: CvSize) -> Any:
    """ResNet v1.5: a 7x7 stem, four stages of bottlenecks (1x1, 3x3 with the stride, 1x1 x4)."""
    torch = common.torch_module()
    nn = torch.nn

    class Bottleneck(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self, cin: int, mid: int, stride: int) -> None:
            super().__init__()
            cout = mid * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False),
                nn.BatchNorm2d(mid),
                nn.ReLU(inplace=True),
                nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False),
                nn.BatchNorm2d(mid),
                nn.ReLU(inplace=True),
                nn.Conv2d(mid, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            )
            self.skip = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x: Any) -> Any:
            return torch.relu(self.body(x) + self.skip(x))

    w = size.width
    layers: list[Any] = [
        nn.Conv2d(3, w, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(w),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, stride=2, padding=1),
    ]
    cin = w
    for stage, count in enumerate(size.blocks):
        mid = w * 2**stage
        for block in range(count):
            layers.append(Bottleneck(cin, mid, 2 if block == 0 and stage > 0 else 1))
            cin = mid * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, size.classes)]
    return nn.Sequential(*layers)


def pool(size: CvSize, device: Any, *, images: int) -> tuple[Any, Any]:
    """Random images (channels_last) and labels, made once on the device."""
    torch = common.torch_module()

    gen = torch.Generator(device=device).manual_seed(3)
    x = torch.randn(images, 3, size.image, size.image, device=device, generator=gen)
    y = torch.randint(0, size.classes, (images,), device=device, generator=gen)
    return x.contiguous(memory_format=torch.channels_last), y
