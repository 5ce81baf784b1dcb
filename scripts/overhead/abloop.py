"""Part 1 of the overhead benchmark: the runner against a bare loop, the same model, batch size,
data, SGD optimizer (training) and seed, alternating A B A B in this one process, per mode.

In one process the two sides share its luck (its threads' placement, its allocator's layout),
which between processes spreads a point's throughput by 8-15% here: the per-round ratio then
judges the runner's own cost per step, not which process was luckier (``bare_loop_ratio.py``
asks the same question across fresh processes, where that spread is in every pair)."""

from __future__ import annotations

import argparse
import contextlib
import io
import math

from sweeps import median, ratio_summary, timed_steps

from overhead import RATIO_GOAL


def synthetic_options(batch_size: int, steps: int) -> dict:
    # Fashion-MNIST's shape; enough samples for every step in one epoch (the pool repeats).
    return {"channels": 1, "image_size": 28, "num_classes": 10, "num_samples": batch_size * steps}


def runner_spec(args: argparse.Namespace, mode: str, *, epochs: int, max_steps: int):
    """The run spec of side A: the schema's defaults, with this script's settings. Inference
    ends once its window holds every measured step (no minimum seconds)."""
    from batchscope.core import config, spec

    sweep = {
        "dataset": {"name": "synthetic"},
        "models": [args.model],
        "modes": [mode],
        "batch_sizes": [args.batch_size],
        "num_workers": [args.num_workers],
        "seeds": [args.seed],
        "device": args.device,
        "deterministic": args.deterministic,
        "measure": {"warmup_steps": args.warmup, "repeats": 1, "min_steps": args.steps,
                    "min_seconds": 0},
        "train": {"epochs": epochs, "max_steps": max_steps, "optimizer": "sgd", "lr": args.lr,
                  "momentum": args.momentum},
        "infer": {"max_steps": max_steps},
    }  # fmt: skip
    return spec.build(
        config.completed(sweep),
        mode=mode,
        model=args.model,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        seed=args.seed,
    )


class Sides:
    """Sides A (``batchscope.bench.runner.run``) and B (a minimal hand-written loop) on one
    device, data split and spec; each side's call runs a fresh model in ``mode`` (trains it, or
    infers) and returns its measured samples over its measured seconds."""

    def __init__(self, args: argparse.Namespace, mode: str):
        import torch

        from batchscope.bench import data, measure, models, seeding

        self.args, self.mode = args, mode
        self.device = measure.resolve_device(args.device)
        if args.threads:
            torch.set_num_threads(args.threads)
        seeding.seed_everything(args.seed, deterministic=args.deterministic)
        self.total = args.warmup + args.steps
        synthetic = synthetic_options(args.batch_size, self.total)
        native = data.native_channels(args.dataset, synthetic)
        self.channels = models.input_channels(args.model, native)
        self.split = data.open_split(
            args.dataset, args.data_root, "train", channels=self.channels, synthetic=synthetic
        )
        per_epoch = len(self.split.dataset) // args.batch_size
        if per_epoch < 1:
            raise SystemExit(f"batch size {args.batch_size} is larger than the dataset")
        epochs = math.ceil(self.total / per_epoch)
        self.cfg = runner_spec(args, mode, epochs=epochs, max_steps=self.total)
        self.bookkeeping: list[float] = []  # the runner's own per-step bookkeeping / step time

    def build(self):
        import torch

        from batchscope.bench import models

        torch.manual_seed(self.args.seed)  # the same initial weights on both sides
        return models.build_model(
            self.args.model, num_classes=self.split.num_classes, in_channels=self.channels
        )

    def side_a(self) -> float:
        from batchscope.bench import runner

        model = self.build()
        with contextlib.redirect_stderr(io.StringIO()):  # the runner's progress bar
            result, _ = runner.run(model, self.cfg, self.device, self.split.dataset)
        if result["status"] != "ok" or result["measured_steps"] != self.args.steps:
            raise SystemExit(f"runner: {result['status']} after {result['steps_run']} steps")
        self.bookkeeping.append(result["time_runner_ms"] / result["step_time_ms_mean"])
        return result["measured_samples"] / result["measured_s"]

    def side_b(self) -> float:
        import torch
        import torch.nn.functional as F
        from torch.utils.data import DataLoader

        from batchscope.bench import measure, models

        args, device = self.args, self.device
        cuda = device.type == "cuda"
        train = self.mode == "train"
        model = self.build().to(device)
        model.train(train)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
        loader = DataLoader(
            self.split.dataset,
            batch_size=args.batch_size,
            shuffle=train,
            drop_last=True,
            num_workers=args.num_workers,
            pin_memory=cuda,
            generator=torch.Generator().manual_seed(args.seed),
        )

        def step(x, y) -> None:
            x = x.to(device, non_blocking=cuda)
            y = y.to(device, non_blocking=cuda)
            if not train:
                with torch.inference_mode():
                    model(x)
                return
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(models.logits_of(model(x)), y)
            loss.backward()
            optimizer.step()

        def clock() -> float:
            return measure.device_clock(device)

        elapsed = timed_steps(loader, step, args.warmup, args.steps, clock)
        return args.steps * args.batch_size / elapsed


def runner_vs_loop(args: argparse.Namespace, mode: str) -> dict:
    import torch

    sides = Sides(args, mode)
    print(
        f"{mode}: model {args.model}, {args.dataset} {tuple(sides.split.dataset[0][0].shape)},"
        f" batch {args.batch_size}, workers {args.num_workers}"
        + (f", SGD lr {args.lr} momentum {args.momentum}" if mode == "train" else "")
        + f", seed {args.seed}, device {sides.device},"
        f" torch threads {torch.get_num_threads()}, deterministic {args.deterministic}"
    )
    print(
        f"{args.rounds} rounds of A (runner.run) then B (bare loop), each {args.warmup} warm-up"
        f" + {args.steps} measured steps; samples/s = measured samples / measured seconds"
    )
    print(f"{'round':>5}  {'A runner/s':>11}  {'B bare/s':>11}  {'A/B':>6}")
    rows = []
    for i in range(1, args.rounds + 1):
        a = sides.side_a()
        b = sides.side_b()
        rows.append((a, b))
        print(f"{i:>5}  {a:>11.1f}  {b:>11.1f}  {a / b:>6.3f}", flush=True)
    return {**print_ratios(rows, sides.bookkeeping), "device": str(sides.device)}


def print_ratios(rows: list[tuple[float, float]], bookkeeping: list[float]) -> dict:
    """The A/B figures of the rounds, printed; the median of the per-round ratios, its IQR."""
    ratios = [a / b for a, b in rows]
    s = ratio_summary(ratios, method="exclusive")
    ratio = median(ratios)
    of_medians = median(a for a, _ in rows) / median(b for _, b in rows)
    of_best = max(a for a, _ in rows) / max(b for _, b in rows)
    print(
        f"A/B: median of per-round ratios {ratio:.3f} (IQR {s['iqr']:.3f}, min {s['min']:.3f},"
        f" max {s['max']:.3f}); ratio of medians {of_medians:.3f}; best A / best B {of_best:.3f}"
    )
    if "geo_mean" in s:
        print(
            f"geometric mean of the per-round ratios {s['geo_mean']:.3f}, 95% interval"
            f" {s['ci_low']:.3f}-{s['ci_high']:.3f} (an interval that holds {RATIO_GOAL} leaves"
            " the goal unsettled by these rounds)"
        )
    print(
        "the runner's own bookkeeping between steps (its time_runner_ms, timed by itself):"
        f" {100 * median(bookkeeping):.2f}% of its step time"
    )
    if s["iqr"] > 1 - RATIO_GOAL:
        print(
            f"note: the per-round ratios spread wider (IQR {s['iqr']:.3f}) than the"
            f" {1 - RATIO_GOAL:.2f} margin judged: the machine's noise, not the runner, decides"
            " this run's verdict; more --rounds narrow the median"
        )
    return {"ratio": ratio, "iqr": s["iqr"]}
