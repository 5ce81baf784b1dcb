"""Harness vs a bare training loop on a GPU, with and without a synchronisation per step.

Issue 12, point 1: a synchronisation at the end of every measured step stops the host from
preparing step i+1 while the device runs step i, so the harness read too slow exactly where it
matters (small models, nw=0). For each model and batch (nw=0, synthetic 3×32×32 data in memory,
SGD) this prints samples/s of four variants, each timed for about ``--seconds``:

- ``bare``: a plain loop (next batch, copy, forward, backward, step), one synchronisation at the
  end of the timed span;
- ``bare+sync``: the same with ``torch.cuda.synchronize()`` after every step;
- ``harness``: ``batchscope.bench.runner.run`` as the workflow runs it (events, no per-step sync);
- ``harness+sync``: the same with a synchronisation before every step end is marked (what the
  harness did before).

``harness`` should sit near ``bare`` and ``harness+sync`` near ``bare+sync``.
Usage: python scripts/sync_check.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import time

import sweeps  # noqa: F401 - this checkout first on sys.path
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from batchscope.bench import loop, models, runner, seeding
from batchscope.core import config as config_module
from batchscope.core import spec as spec_module

CASES = [("small_cnn", 64), ("small_cnn", 1024), ("resnet18", 64), ("resnet18", 512)]


def dataset(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,)))


def build(name: str, device: torch.device) -> torch.nn.Module:
    seeding.seed_everything(0, deterministic=False, compile=False)
    return models.build_model(name, num_classes=10, in_channels=3).to(device).train()


def bare(name: str, batch: int, device, seconds: float, sync: bool) -> float:
    model = build(name, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(dataset(batch * 64), batch_size=batch, shuffle=True, drop_last=True,
                        pin_memory=True)  # fmt: skip

    def batches():
        while True:
            yield from loader

    stream = batches()

    def step():
        x, y = next(stream)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = F.cross_entropy(models.logits_of(model(x)), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if sync:
            torch.cuda.synchronize()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        step()
        steps += 1
    torch.cuda.synchronize()
    return steps * batch / (time.perf_counter() - started)


def harness(name: str, batch: int, device, seconds: float, sync: bool) -> float:
    config = {
        "dataset": {"name": "synthetic", "channels": 3, "image_size": 32, "num_classes": 10,
                    "num_samples": batch * 64},
        "models": [name], "modes": ["train"], "batch_sizes": [batch], "num_workers": [0],
        "seeds": [0], "device": "cuda", "deterministic": False,
        "measure": {"warmup_steps": 10, "repeats": 3, "min_seconds": seconds / 3,
                    "diagnostic_steps": 0, "ceiling": False},
        "train": {"epochs": 1000, "lr": 0.01, "momentum": 0.9},
    }  # fmt: skip
    config = config_module.completed(config)
    spec = spec_module.build(config, kind="bench", mode="train", model=name, batch_size=batch,
                             accumulation_steps=1, num_workers=0, seed=0)  # fmt: skip
    real_mark = loop.StepClock.mark

    def synced_mark(self):
        torch.cuda.synchronize()
        return real_mark(self)

    if sync:
        loop.StepClock.mark = synced_mark
    try:
        result, _ = runner.run(build(name, device), spec, device, dataset(batch * 64))
    finally:
        loop.StepClock.mark = real_mark
    return result["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    assert torch.cuda.is_available(), "sync_check needs a CUDA GPU"
    device = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, nw=0, 3x32x32, SGD")
    print(f"{'model':>10} {'batch':>6} {'bare':>10} {'bare+sync':>10} {'harness':>10}"
          f" {'harn+sync':>10} {'harness/bare':>12}")  # fmt: skip
    for name, batch in CASES:
        rates = [
            bare(name, batch, device, args.seconds, sync=False),
            bare(name, batch, device, args.seconds, sync=True),
            harness(name, batch, device, args.seconds, sync=False),
            harness(name, batch, device, args.seconds, sync=True),
        ]
        cells = " ".join(f"{r:>10.0f}" for r in rates)
        print(f"{name:>10} {batch:>6} {cells} {rates[2] / rates[0]:>12.3f}", flush=True)


if __name__ == "__main__":
    main()
