"""A model of your own: any ``torch.nn.Module``, built by a function that takes keyword arguments.

batchscope imports this file (``factory: model.py:build`` in config.yaml, a path relative to the
config file), calls ``build(**kwargs)`` with the entry's ``kwargs``, and measures what it
returns. The function gets only those kwargs: the input channels and classes are yours to pass.
"""

from __future__ import annotations

from torch import nn


class Block(nn.Module):
    """Depthwise-separable convolution with a residual connection."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1, groups=width, bias=False),
            nn.BatchNorm2d(width),
            nn.Conv2d(width, width, 1, bias=False),
            nn.BatchNorm2d(width),
        )
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.act(x + self.body(x))


class SeparableNet(nn.Module):
    """A stem, ``depth`` blocks per stage at two resolutions, global pooling, a linear head."""

    def __init__(self, in_channels: int, num_classes: int, width: int, depth: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
        )
        self.stage1 = nn.Sequential(*(Block(width) for _ in range(depth)))
        self.down = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False)
        self.stage2 = nn.Sequential(*(Block(2 * width) for _ in range(depth)))
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, num_classes)
        )

    def forward(self, x):
        return self.head(self.stage2(self.down(self.stage1(self.stem(x)))))


def build(
    in_channels: int = 1, num_classes: int = 10, width: int = 32, depth: int = 2
) -> nn.Module:
    """The factory config.yaml names: every argument comes from the entry's ``kwargs``."""
    return SeparableNet(in_channels, num_classes, width, depth)
