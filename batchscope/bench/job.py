"""Entry point of one benchmark job: one mode × model × batch size × workers × seed.

    python -m batchscope.bench --mode train --model small_cnn --dataset fashion_mnist \\
        --data-root resources/datasets/fashion_mnist --batch-size 64 --num-workers 2 --seed 0 \\
        --output run.json --steps run.steps.csv

Writes the steps CSV, then the result JSON (both atomically). An OOM or a diverged loss is a
result (exit 0); any other error exits non-zero and writes nothing. Imports no plotting library.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime

from batchscope.core import results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m batchscope.bench", description=__doc__.split("\n")[0]
    )
    p.add_argument("--mode", choices=("train", "infer"), required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--data-root", default=None, help="folder the dataset was prepared in")
    p.add_argument("--dataset-options", default="{}", help="JSON: image_size, synthetic sizes")
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--num-workers", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3, help="measurement windows")
    p.add_argument("--min-steps", type=int, default=0, help="measured steps per window, at least")
    p.add_argument("--min-seconds", type=float, default=0.0, help="seconds per window, at least")
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--compile-backend", default="inductor")
    p.add_argument("--peak-tflops", type=float, default=None, help="device peak, for MFU")
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--val-batch-size", type=int, default=512, help="validation pass, not timed")
    p.add_argument("--accumulation-steps", type=int, default=1, help="micro-batches per update")
    p.add_argument("--lr-scaling", choices=("none", "linear", "sqrt"), default="none")
    p.add_argument("--base-batch-size", type=int, default=None, help="batch --lr is meant for")
    p.add_argument("--lr-warmup-steps", type=int, default=0)
    p.add_argument("--lr-warmup-epochs", type=float, default=None, help="instead of steps")
    p.add_argument("--lr-decay", choices=("constant", "cosine"), default="constant")
    p.add_argument("--eval-every-samples", type=int, default=None, help="validate while training")
    p.add_argument(
        "--eval-samples", type=int, default=None, help="held-out samples each such validation uses"
    )
    p.add_argument(
        "--stop-at-target", action="store_true", help="end training when the target is reached"
    )
    p.add_argument("--target-accuracy", type=float, default=None)
    p.add_argument("--target-loss", type=float, default=None)
    p.add_argument("--noise-every-steps", type=int, default=None, help="gradient noise scale")
    p.add_argument(
        "--validate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="training: accuracy on the held-out split afterwards",
    )
    p.add_argument("--pin-memory", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--non-blocking", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--prefetch-factor", type=int, default=2)
    p.add_argument("--persistent-workers", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--cpu-memory-budget-mb", type=float, default=None)
    p.add_argument("--output", required=True, help="result JSON")
    p.add_argument("--steps", required=True, help="per-step CSV")
    args = p.parse_args(argv)
    positive = ("batch_size", "epochs", "prefetch_factor", "val_batch_size", "repeats")
    for name in (*positive, "accumulation_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.num_workers < 0 or args.warmup_steps < 0:
        p.error("--num-workers and --warmup-steps must not be negative")
    if args.lr_warmup_epochs is not None and (args.lr_warmup_steps or args.lr_warmup_epochs < 0):
        p.error("give --lr-warmup-steps or a non-negative --lr-warmup-epochs, not both")
    if args.mode == "infer" and args.accumulation_steps != 1:
        p.error("--accumulation-steps is a training setting: inference runs use 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from batchscope.bench.data import DatasetError
    from batchscope.bench.measure import DeviceError
    from batchscope.bench.runner import NothingToMeasure

    try:
        return _bench(args)
    except (DeviceError, DatasetError, NothingToMeasure) as exc:  # bad input: one line
        print(f"batchscope bench: error: {exc}", file=sys.stderr)
        return 1


def _bench(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")

    import torch

    from batchscope.bench import data, envinfo, measure, models, runner, seeding

    env = envinfo.runtime(args.device)  # before threads and seeds are set: the environment as given
    device = measure.resolve_device(args.device)
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if args.threads:
        torch.set_num_threads(max(1, min(args.threads, affinity)))
    seeds = seeding.seed_everything(args.seed, deterministic=args.deterministic)

    options = json.loads(args.dataset_options)
    native = data.native_channels(args.dataset, options.get("synthetic"))
    channels = models.input_channels(args.model, native)
    split_kwargs = {
        "channels": channels,
        "image_size": options.get("image_size"),
        "synthetic": options.get("synthetic"),
    }
    split = "train" if args.mode == "train" else "test"
    work = data.open_split(args.dataset, args.data_root, split, **split_kwargs)
    val = (
        data.open_split(args.dataset, args.data_root, "test", **split_kwargs)
        if split == "train" and args.validate
        else None
    )

    def build():
        return models.build_model(args.model, num_classes=work.num_classes, in_channels=channels)

    model = build()
    shape = tuple(work.dataset[0][0].shape)
    flops = measure.flops_per_sample(build, shape, train=args.mode == "train")

    cfg = runner.RunConfig(
        mode=args.mode,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        seed=args.seed,
        epochs=args.epochs,
        max_steps=args.max_steps,
        warmup_steps=args.warmup_steps,
        repeats=args.repeats,
        min_steps=args.min_steps,
        min_seconds=args.min_seconds,
        precision=args.precision,
        channels_last=args.channels_last,
        compile=args.compile,
        compile_backend=args.compile_backend,
        optimizer=args.optimizer,
        lr=args.lr,
        momentum=args.momentum,
        weight_decay=args.weight_decay,
        val_batch_size=args.val_batch_size,
        accumulation_steps=args.accumulation_steps,
        lr_scaling=args.lr_scaling,
        base_batch_size=args.base_batch_size,
        lr_warmup_steps=args.lr_warmup_steps,
        lr_warmup_epochs=args.lr_warmup_epochs,
        lr_decay=args.lr_decay,
        eval_every_samples=args.eval_every_samples,
        target_accuracy=args.target_accuracy,
        target_loss=args.target_loss,
        noise_every_steps=args.noise_every_steps,
        eval_samples=args.eval_samples,
        stop_at_target=args.stop_at_target,
        loader=runner.LoaderSettings(
            pin_memory=args.pin_memory,
            non_blocking=args.non_blocking,
            prefetch_factor=args.prefetch_factor,
            persistent_workers=args.persistent_workers,
        ),
    )
    print(
        f"batchscope bench: {args.mode} {args.model} on {args.dataset},"
        f" batch_size={args.batch_size} accumulation_steps={args.accumulation_steps}"
        f" num_workers={args.num_workers} seed={args.seed}"
        f" device={device} threads={torch.get_num_threads()} env={env['fingerprint']}",
        file=sys.stderr,
    )
    outcome, steps = runner.run(
        model,
        cfg,
        device,
        work.dataset,
        val.dataset if val else None,
        cpu_memory_budget_mb=args.cpu_memory_budget_mb,
    )
    peak = args.peak_tflops or measure.peak_tflops(env["device_name"], args.precision)
    achieved = flops * outcome["samples_per_s"] / 1e12 if outcome["samples_per_s"] else None
    result = {
        "schema_version": results.SCHEMA_VERSION,
        "mode": args.mode,
        "model": args.model,
        "dataset": args.dataset,
        "batch_size": args.batch_size,
        "accumulation_steps": args.accumulation_steps,
        "num_workers": args.num_workers,
        "seed": args.seed,
        "device": str(device),
        "device_name": env["device_name"],
        **outcome,
        "flops_per_sample": flops,
        "achieved_tflops": achieved,
        "peak_tflops": peak if device.type == "cuda" else None,
        "mfu": achieved / peak if achieved and peak and device.type == "cuda" else None,
        "precision": args.precision,
        "channels_last": args.channels_last,
        "compile": args.compile,
        "image_size": work.image_size,
        "channels": channels,
        "images_skipped": work.skipped,
        "epochs": args.epochs,
        "max_steps": args.max_steps,
        "optimizer": args.optimizer if args.mode == "train" else None,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": env["env"]["OMP_NUM_THREADS"],
        "cuda_visible_devices": env["env"]["CUDA_VISIBLE_DEVICES"],
        "slurm_job_id": env["env"]["SLURM_JOB_ID"],
        "pin_memory": cfg.loader.pin_memory,
        "non_blocking": cfg.loader.non_blocking,
        "prefetch_factor": cfg.loader.prefetch_factor,
        "persistent_workers": cfg.loader.persistent_workers,
        "deterministic": seeds["deterministic"],
        "pythonhashseed": seeds["pythonhashseed"],
        "cpu_memory_budget_mb": args.cpu_memory_budget_mb,
        "env_fingerprint": env["fingerprint"],
        "torch_version": env["packages"]["torch"],
        "started_at": started_at,
        "wall_s": time.perf_counter() - started,
    }
    results.write_csv(args.steps, steps, results.STEP_COLUMNS)
    results.write_json(args.output, result)
    summary = {k: result[k] for k in ("status", "samples_per_s", "peak_mem_mb", "val_accuracy")}
    print(f"batchscope bench: done {json.dumps(summary)}", file=sys.stderr)
    return 0


def exit_without_teardown(code: int) -> None:
    """End the process once its results are on disk, skipping the interpreter's teardown of
    torch's thousands of modules (about a second per job here, paid by every grid point).

    When a child process is still alive (a DataLoader worker, say), exit normally instead, so
    that the usual shutdown stops it rather than leaving it behind.
    """
    import multiprocessing

    if multiprocessing.active_children():
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_without_teardown(main())
