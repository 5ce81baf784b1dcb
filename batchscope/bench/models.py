"""Models: a small built-in CNN, or any torchvision classification model by name.

torchvision is imported only to list or build one of its models: the small CNN needs torch alone.
"""

from __future__ import annotations

import torch
from torch import nn

SMALL_CNN = "small_cnn"


class SmallCNN(nn.Module):
    """Two conv blocks and a linear head: cheap enough to sweep on a laptop CPU.

    Works for any channel count and any image size of at least 4 pixels (adaptive pooling).
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, width: int = 32):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, kernel_size=3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, kernel_size=3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(4),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(2 * width * 16, 128),
            nn.ReLU(inplace=True),
            nn.Linear(128, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def available_models() -> list[str]:
    """Every name :func:`build_model` accepts."""
    import torchvision

    return [SMALL_CNN, *torchvision.models.list_models(module=torchvision.models)]


def needs_torchvision(name: str) -> bool:
    """Whether building model ``name`` imports torchvision (every model but the small CNN)."""
    return name != SMALL_CNN


def input_channels(model_name: str, dataset_channels: int) -> int:
    """Channels the model expects: the small CNN takes the data as it is, torchvision models RGB."""
    return dataset_channels if model_name == SMALL_CNN else 3


def build_model(name: str, *, num_classes: int, in_channels: int) -> nn.Module:
    """Build an untrained model: no weights are downloaded, the numbers measure speed."""
    if name == SMALL_CNN:
        return SmallCNN(in_channels=in_channels, num_classes=num_classes)
    import torchvision

    known = torchvision.models.list_models(module=torchvision.models)
    if name not in known:
        raise ValueError(f"unknown model {name!r}: use {SMALL_CNN!r} or a torchvision name")
    if in_channels != 3:
        raise ValueError(f"torchvision model {name!r} takes 3 input channels, not {in_channels}")
    return torchvision.models.get_model(name, weights=None, num_classes=num_classes)


def logits_of(output) -> torch.Tensor:
    """The logits of a forward pass; inception-style models return a tuple in train mode."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    return logits if logits is not None else output[0]
