"""The gradient noise scale measured before vs after the update on the same batch (issue 12, 5).

Trains the small CNN on Fashion-MNIST (SGD, lr 0.05, momentum 0.9 by default) twice with the
same seed, so both runs follow the same trajectory (a measurement forks the RNG and restores
BatchNorm's buffers, so it does not perturb training):

- ``before``: batchscope's placement, on the batch of the next update before it is applied;
- ``after``: the old placement, on the batch the model has just been updated on.

Prints B_simple and the EMA of |G|² and tr Σ of each, and after/before. Needs the dataset's
files in ``--source`` (a folder holding the four ``*-ubyte.gz`` files); it is prepared in
``--root``.

Usage: python scripts/noise_placement.py [--steps 300] [--every 5] [--batch 128]
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import sweeps  # noqa: F401 - this checkout first on sys.path
import torch

from batchscope.bench import data, fetch, models, runner, seeding
from batchscope.core import config as config_module
from batchscope.core import spec as spec_module


def old_placement(real):
    """``runner.convergence_hooks`` with the noise measured after the step, on its batch."""

    def hooks(*args):
        before, after = real(*args)

        def after_old(step, seen, x, y):
            extra = dict(before(step, seen, x, y) or {})
            extra.update(after(step, seen, x, y) or {})
            return extra or None

        after_old.reached = after.reached
        return None, after_old

    return hooks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--root", default="/tmp/batchscope-fashion-mnist")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    args = parser.parse_args()
    fetch.prepare("fashion_mnist", args.root, mirrors=[args.source.rstrip("/") + "/"])
    split = data.open_split("fashion_mnist", args.root, "train")
    config = {
        "dataset": {"name": "fashion_mnist"}, "models": ["small_cnn"], "modes": ["train"],
        "batch_sizes": [args.batch], "num_workers": [0], "seeds": [0], "device": "cpu",
        "measure": {"warmup_steps": 1, "min_seconds": 0, "diagnostic_steps": 0},
        "train": {"max_steps": args.steps, "lr": args.lr, "momentum": args.momentum,
                  "noise_scale_every_steps": args.every},
    }  # fmt: skip
    config = config_module.completed(config)
    spec = spec_module.build(config, mode="train", model="small_cnn", batch_size=args.batch,
                             num_workers=0, seed=0)  # fmt: skip
    # a target never reached: the run does all its steps (a throughput run would stop once its
    # windows are full); no validation, which is not what this compares
    spec = replace(spec, train=replace(spec.train, target_loss=1e-9, validate=False))
    out = {}
    real = runner.convergence_hooks
    for name in ("before", "after"):
        seeding.seed_everything(0, deterministic=True, compile=False)
        model = models.build_model("small_cnn", num_classes=10, in_channels=1)
        runner.convergence_hooks = real if name == "before" else old_placement(real)
        try:
            result, _ = runner.run(model, spec, torch.device("cpu"), split.dataset)
        finally:
            runner.convergence_hooks = real
        out[name] = result
        print(
            f"{name:>6}: B_simple {result['noise_scale_b_simple']:.1f}"
            f"  |G|^2 {result['noise_scale_grad_sq_norm']:.4g}"
            f"  tr(Sigma) {result['noise_scale_trace_cov']:.4g}"
            f"  measurements {result['noise_scale_measurements']}"
            f"  final loss {result['final_loss']:.3f}",
            flush=True,
        )
    b, a = out["before"], out["after"]
    print(
        f"after/before: B_simple {a['noise_scale_b_simple'] / b['noise_scale_b_simple']:.3f}"
        f"  |G|^2 {a['noise_scale_grad_sq_norm'] / b['noise_scale_grad_sq_norm']:.3f}"
        f"  tr(Sigma) {a['noise_scale_trace_cov'] / b['noise_scale_trace_cov']:.3f}"
        f"  ({args.steps} steps of batch {args.batch}, lr {args.lr}, momentum {args.momentum},"
        f" every {args.every})"
    )


if __name__ == "__main__":
    main()
