"""The whole pipeline against an independent bare loop (issue 23, point 8): samples/s, A / B.

A: ``python -m batchscope.bench SPEC`` in a fresh process, as the workflow runs a grid point:
the default config's settings (schema defaults) with a synthetic dataset of 3 x 32 x 32
images, ``--model`` (a torchvision name, resnet18) with the data's 10 classes, batch 64,
0 workers, ``--threads`` 2; its ``samples_per_s`` (the median of its windows) and its
``measured_samples / measured_s``.

B: this file's ``bare`` command in a fresh process that never imports batchscope (its path is
not on ``PYTHONPATH``): random tensors of the same shape and count in a ``TensorDataset``, a
plain ``DataLoader`` (shuffled for training, drop_last), the stock torchvision model with the
same ``num_classes``, SGD with the same learning rate and momentum, ``torch.set_num_threads``,
A's deterministic setting (``--bare-deterministic`` to differ), A's warm-up, then as many
measured steps as A measured, a ``perf_counter`` around them.

Each pair runs A and B, mode after mode, ``--pairs`` times, B first in every other pair (so
that neither side always runs right after the other). It prints every pair and, per mode, the
median of the per-pair ratios (A samples_per_s / B) with their spread, and the ratio with A's
overall mean (measured_samples / measured_s). The goal is 0.97.

    .venv/bin/python scripts/bare_loop_ratio.py                 # 5 pairs, train and infer
    .venv/bin/python scripts/bare_loop_ratio.py --pairs 7 --modes infer
    .venv/bin/python scripts/bare_loop_ratio.py --checkout /tmp/old   # A from another copy

It asserts nothing and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sweeps import (
    REPO,
    bare_result,
    bare_setup,
    plain_step,
    ratio_summary,
    subprocess_env,
    timed_steps,
)

GOAL = 0.97


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--modes", nargs="+", default=["train", "infer"], choices=("train", "infer"))
    p.add_argument("--model", default="resnet18", help="a torchvision classification model")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=None,
                   help="A's setting (default: the config's default, true)")  # fmt: skip
    p.add_argument("--bare-deterministic", action=argparse.BooleanOptionalAction, default=None,
                   help="B's setting (default: A's)")  # fmt: skip
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for A (dotted key, YAML value); repeatable")  # fmt: skip
    p.add_argument("--checkout", type=Path, default=REPO, help="the copy of batchscope A runs")
    p.add_argument("--workdir", type=Path, default=None)
    return p.parse_args(argv)


def a_spec(args: argparse.Namespace, mode: str):
    """Side A's run spec: the default config's settings for this point (round 2: no
    diagnostic steps or validation after the windows, which samples_per_s does not see)."""
    from batchscope.core import config, spec

    sweep = {
        "dataset": {"name": "synthetic", "channels": 3, "image_size": args.image_size},
        "models": [args.model], "modes": [mode], "batch_sizes": [args.batch_size],
        "num_workers": [0], "seeds": [0], "device": "cpu",
    }  # fmt: skip
    if args.deterministic is not None:
        sweep["deterministic"] = args.deterministic
    cfg = config.completed(config.with_overrides(sweep, args.set))
    return spec.build(
        cfg, mode=mode, model=args.model, batch_size=args.batch_size, num_workers=0,
        seed=0, round=2,
    )  # fmt: skip


def env_for(checkout: Path | None) -> dict[str, str]:
    """A side's environment: ``checkout`` first on PYTHONPATH (None: no PYTHONPATH), the same
    hash seed on both sides."""
    return {**subprocess_env(checkout), "PYTHONHASHSEED": "0"}


def run_a(args: argparse.Namespace, spec_path: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "batchscope.bench", str(spec_path)]
    cmd += ["--threads", str(args.threads), "--output", f"{out}.json", "--steps", f"{out}.csv"]
    # in the work folder: `python -m` puts the working directory first on sys.path, ahead of
    # PYTHONPATH, and a run from a checkout would import that checkout instead of --checkout
    env = env_for(args.checkout.resolve())
    done = subprocess.run(cmd, env=env, cwd=out.parent, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"A exited {done.returncode}:\n{done.stderr[-2000:]}")
    result = json.loads(Path(f"{out}.json").read_text())
    if result["status"] != "ok":
        raise SystemExit(f"A: status {result['status']}: {result.get('error')}")
    return result


def run_b(args: argparse.Namespace, spec, result: dict, deterministic: bool) -> dict:
    train = spec.train
    cmd = [sys.executable, str(Path(__file__).resolve()), "bare", "--mode", spec.mode]
    cmd += ["--model", args.model, "--batch-size", str(spec.batch_size)]
    cmd += ["--image-size", str(spec.dataset.synthetic.image_size)]
    cmd += ["--num-classes", str(spec.dataset.synthetic.num_classes)]
    cmd += ["--num-samples", str(spec.dataset.synthetic.num_samples)]
    cmd += ["--threads", str(args.threads), "--seed", str(spec.seed)]
    cmd += ["--warmup", str(result["warmup_steps"]), "--steps", str(result["measured_steps"])]
    if train is not None:
        cmd += ["--lr", str(train.lr), "--momentum", str(train.momentum)]
    cmd += ["--deterministic" if deterministic else "--no-deterministic"]
    done = subprocess.run(
        cmd, env=env_for(None), cwd=tempfile.gettempdir(), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"B exited {done.returncode}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_pair(args, spec, spec_path: Path, out: Path, deterministic: bool, previous):
    """A and B in turn; B first when given ``previous`` (an earlier A's result, whose warm-up
    and measured steps B runs), so that pairs alternate and neither side always follows the
    other. Returns (A's result, B's, A's seconds, B's)."""
    clock = time.perf_counter
    if previous is not None:
        started = clock()
        b = run_b(args, spec, previous, deterministic)
        b_s, started = clock() - started, clock()
        a = run_a(args, spec_path, out)
        return a, b, clock() - started, b_s
    started = clock()
    a = run_a(args, spec_path, out)
    a_s, started = clock() - started, clock()
    b = run_b(args, spec, a, deterministic)
    return a, b, a_s, clock() - started


def spread(values: list[float]) -> str:
    s = ratio_summary(values, method="exclusive")
    text = f"IQR {s['iqr']:.3f}, min {s['min']:.3f}, max {s['max']:.3f}"
    if "geo_mean" in s:
        text += f"; geometric mean {s['geo_mean']:.3f} ({s['ci_low']:.3f}-{s['ci_high']:.3f})"
    return text


def compare(argv: list[str]) -> int:
    args = parse_args(argv)
    folder = args.workdir or Path(tempfile.mkdtemp(prefix="batchscope-bare-loop-"))
    folder.mkdir(parents=True, exist_ok=True)
    specs = {mode: a_spec(args, mode) for mode in args.modes}
    paths = {}
    for mode, spec in specs.items():
        paths[mode] = folder / f"{mode}.spec.json"
        paths[mode].write_text(spec.to_json())
    det = {m: s.deterministic for m, s in specs.items()}
    bare_det = {m: d if args.bare_deterministic is None else args.bare_deterministic
                for m, d in det.items()}  # fmt: skip
    print(f"{args.model} on synthetic 3x{args.image_size}x{args.image_size}, batch"
          f" {args.batch_size}, 0 workers, {args.threads} threads; deterministic A {det},"
          f" B {bare_det}; A from {args.checkout}; folder {folder}")  # fmt: skip
    print(f"{'mode':<5} {'pair':>4} {'A/s':>8} {'A mean/s':>9} {'B/s':>8} {'A/B':>6}"
          f" {'Amean/B':>7} {'steps':>5} {'A s':>6} {'B s':>6}")  # fmt: skip
    ratios = {m: [] for m in args.modes}
    last: dict[str, dict] = {}
    for i in range(1, args.pairs + 1):
        for mode in args.modes:
            previous = last.get(mode) if i % 2 == 0 else None  # B first in even pairs
            a, b, a_s, b_s = run_pair(args, specs[mode], paths[mode], folder / f"a-{mode}-{i}",
                                      bare_det[mode], previous)  # fmt: skip
            last[mode] = a
            if b["batchscope_loaded"]:
                raise SystemExit("B imported batchscope: it is not independent")
            a_mean = a["measured_samples"] / a["measured_s"]
            pair = (a["samples_per_s"] / b["samples_per_s"], a_mean / b["samples_per_s"])
            ratios[mode].append(pair)
            print(f"{mode:<5} {i:>4} {a['samples_per_s']:>8.1f} {a_mean:>9.1f}"
                  f" {b['samples_per_s']:>8.1f} {pair[0]:>6.3f} {pair[1]:>7.3f}"
                  f" {a['measured_steps']:>5} {a_s:>6.1f} {b_s:>6.1f}", flush=True)  # fmt: skip
    print()
    for mode, pairs in ratios.items():
        windows, means = [r for r, _ in pairs], [r for _, r in pairs]
        print(f"{mode}: median A/B {statistics.median(windows):.3f} ({spread(windows)}); with"
              f" A's measured mean: {statistics.median(means):.3f} ({spread(means)});"
              f" goal >= {GOAL}")  # fmt: skip
    return 0


# ----------------------------------------------------------------------------- B: bare loop


def bare(argv: list[str]) -> int:
    """A plain PyTorch loop, no batchscope; prints one JSON line."""
    p = argparse.ArgumentParser(prog="bare_loop_ratio.py bare")
    p.add_argument("--mode", choices=("train", "infer"), required=True)
    p.add_argument("--model", default="resnet18")
    for name, default in (
        ("batch-size", 64),
        ("image-size", 32),
        ("num-classes", 10),
        ("num-samples", 2048),
        ("threads", 2),
        ("seed", 0),
        ("warmup", 5),
    ):
        p.add_argument(f"--{name}", type=int, default=default)  # fmt: skip
    p.add_argument("--steps", type=int, required=True, help="measured steps")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=True)
    a = p.parse_args(argv)

    import torch
    import torchvision
    from torch.utils.data import DataLoader, TensorDataset

    bare_setup(a.threads, a.deterministic)
    torch.manual_seed(a.seed)
    shape = (a.num_samples, 3, a.image_size, a.image_size)
    data = TensorDataset(torch.randn(shape), torch.randint(a.num_classes, (a.num_samples,)))
    model = torchvision.models.get_model(a.model, weights=None, num_classes=a.num_classes)
    train = a.mode == "train"
    model.train(train)
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    loader = DataLoader(data, batch_size=a.batch_size, shuffle=train, drop_last=True,
                        generator=torch.Generator().manual_seed(a.seed))  # fmt: skip
    elapsed = timed_steps(loader, plain_step(model, optimizer, train), a.warmup, a.steps)
    print(bare_result(a.steps, a.batch_size, elapsed))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["bare"]:
        sys.exit(bare(sys.argv[2:]))
    sys.exit(compare(sys.argv[1:]))
