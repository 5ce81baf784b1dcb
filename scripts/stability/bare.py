"""A bare PyTorch loop, written without batchscope (side B of part (c)).

Prints one JSON line: samples_per_s over the measured steps, the threads used, and whether
batchscope was imported (it must not be)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
from sweeps import bare_result, bare_setup, plain_step, timed_steps
from torch import nn
from torch.utils.data import DataLoader
from torchvision import transforms
from torchvision.datasets import FashionMNIST


class SmallCNN(nn.Module):  # batchscope.bench.models.SmallCNN, by hand
    def __init__(self, in_channels: int = 1, num_classes: int = 10, width: int = 32):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
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

    def forward(self, x):
        return self.classifier(self.features(x))


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="stability_benchmark.py bare-loop", description=__doc__)
    p.add_argument("--mode", choices=("train", "infer"), required=True)
    p.add_argument("--data-root", required=True, help="a prepared fashion_mnist folder")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, required=True, help="measured steps")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=True)
    return p.parse_args(argv)


def main(argv: Sequence[str]) -> int:
    a = parse_args(argv)
    bare_setup(a.threads, a.deterministic)
    train = a.mode == "train"
    transform = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.2860,), (0.3530,))]
    )
    data = FashionMNIST(a.data_root, train=train, transform=transform, download=False)
    torch.manual_seed(a.seed)
    model = SmallCNN()
    model.train(train)
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    loader = DataLoader(
        data,
        batch_size=a.batch_size,
        shuffle=train,
        drop_last=True,
        num_workers=a.num_workers,
        generator=torch.Generator().manual_seed(a.seed),
    )
    step = plain_step(model, optimizer, train)
    elapsed = timed_steps(loader, step, a.warmup, a.steps)
    print(bare_result(a.steps, a.batch_size, elapsed))
    return 0
