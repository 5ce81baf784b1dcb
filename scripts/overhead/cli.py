"""The overhead benchmark's command line: its options, each part in turn, and the table of goals
(goal, measured, target, PASS/MISS)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from sweeps import heading, run_sweep

from overhead import FIXED_COST_GOAL, PLOTTING, RATIO_GOAL, SEARCH_TOLERANCE, SWEEP_GOAL
from overhead.abloop import runner_vs_loop
from overhead.autosearch import auto_search, real_maxbatch
from overhead.fixedcost import fixed_cost
from overhead.sweepwork import sweep_vs_work


def parse_args(argv: list[str], description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--device", default="cpu", help="cpu, cuda, auto (runner vs loop, fixed cost)")
    p.add_argument("--model", default="small_cnn")
    p.add_argument("--dataset", choices=("synthetic", "fashion_mnist"), default="synthetic")
    p.add_argument("--data-root", default=None, help="a prepared fashion_mnist folder")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--rounds", type=int, default=4, help="A B pairs per mode")
    p.add_argument("--modes", nargs="+", choices=("train", "infer"), default=["train", "infer"],
                   help="runner vs loop in these modes")  # fmt: skip
    p.add_argument("--steps", type=int, default=40, help="measured steps per run")
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps per run")
    p.add_argument("--skip-ab", action="store_true", help="skip runner vs bare loop")
    p.add_argument("--skip-fixed-cost", action="store_true", help="skip the bench processes")
    p.add_argument("--fixed-runs", type=int, default=5, help="tiny bench processes to time")
    sweep = p.add_mutually_exclusive_group()
    sweep.add_argument("--sweep", type=Path, default=None, help="a finished sweep's folder")
    sweep.add_argument("--run-sweep", action="store_true", help="run the default sweep (minutes)")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="for --run-sweep")
    p.add_argument("--search-max", type=int, default=2100, help="fake limits 1..N, and more")
    p.add_argument("--real-maxbatch", action="store_true", help="also a real CPU maxbatch run")
    args = p.parse_args(argv)
    if args.dataset == "fashion_mnist" and args.data_root is None:
        p.error("--dataset fashion_mnist needs --data-root (a folder `make run` prepared)")
    if min(args.rounds, args.steps, args.batch_size, args.fixed_runs, args.search_max) < 1:
        p.error("--rounds, --steps, --batch-size, --fixed-runs, --search-max must be at least 1")
    if args.warmup < 0 or args.num_workers < 0:
        p.error("--warmup and --num-workers must not be negative")
    return args


def verdict(ok: bool | None, noisy: bool = False) -> str:
    if ok is None:
        return "-"
    return ("PASS" if ok else "MISS") + ("*" if noisy else "")


#: The table's rows: (goal, measured, target, PASS/MISS/None for not judged).
Row = tuple[str, str, str, bool | None]


def ab_rows(args: argparse.Namespace, noisy: set[str]) -> list[Row]:
    """Part 1, runner vs a bare loop (a goal whose rounds spread wider than its margin is
    added to ``noisy``)."""
    if args.skip_ab:
        return [("runner / bare loop, samples/s", "skipped", f">= {RATIO_GOAL}", None)]
    rows: list[Row] = []
    for mode in args.modes:
        heading(f"1. runner vs bare loop, {mode} ({args.device})")
        ab = runner_vs_loop(args, mode)
        goal = f"runner / bare loop, {mode} samples/s ({ab['device']})"
        measured = f"{ab['ratio']:.3f} (IQR {ab['iqr']:.3f})"
        if ab["iqr"] > 1 - RATIO_GOAL:
            noisy.add(goal)
        rows.append((goal, measured, f">= {RATIO_GOAL}", ab["ratio"] >= RATIO_GOAL))
    return rows


def fixed_cost_rows(args: argparse.Namespace) -> list[Row]:
    """Part 2, the fixed cost per bench job and the modules a bench run loads."""
    fixed_goal = f"<= {FIXED_COST_GOAL}"
    if args.skip_fixed_cost:
        return [
            ("per-job fixed cost / import torch", "skipped", fixed_goal, None),
            ("small CNN inference loads no torchvision, PIL or compiler", "skipped", "none", None),
            ("bench imports no plotting library", "skipped", "none", None),
        ]
    heading("2. fixed cost per bench job")
    fc = fixed_cost(args)
    measured = f"{fc['fixed_s']:.2f} s / {fc['floor_s']:.2f} s = {fc['ratio']:.2f}"
    ok = fc["ratio"] <= FIXED_COST_GOAL
    rows: list[Row] = [("per-job fixed cost / import torch", measured, fixed_goal, ok)]
    train = fc["train_fixed_s"]
    measured = f"{train:.2f} s / {fc['floor_s']:.2f} s = {train / fc['floor_s']:.2f}"
    target = f"- (with torch.optim: {fc['train_floor_s']:.2f} s)"
    rows.append(("the same, training (information)", measured, target, None))
    if args.model == "small_cnn" and args.dataset == "synthetic":
        heavy = [m for m in fc["infer_heavy"] if m not in PLOTTING]
        goal = "small CNN inference loads no torchvision, PIL or compiler"
        rows.append((goal, ", ".join(heavy) or "none", "none", not heavy))
    loaded = ", ".join(fc["plotting"]) or "none"
    rows.append(("bench imports no plotting library", loaded, "none", not fc["plotting"]))
    return rows


def sweep_rows(args: argparse.Namespace) -> list[Row]:
    """Part 3, a sweep's wall time against its jobs' work (``--sweep`` or ``--run-sweep``)."""
    sweep_goal = f"<= {SWEEP_GOAL}"
    if args.sweep is None and not args.run_sweep:
        return [("sweep wall / the jobs' own work", "not measured", sweep_goal, None)]
    heading("3. sweep wall time vs its jobs' work")
    command_s = None
    folder = args.sweep
    if args.run_sweep:
        folder, command_s = run_sweep("default", args.cores)
    sw = sweep_vs_work(folder.resolve(), command_s)
    ok = sw["ratio"] <= SWEEP_GOAL
    return [("sweep wall / the jobs' own work", f"{sw['ratio']:.2f}", sweep_goal, ok)]


def search_rows(args: argparse.Namespace) -> list[Row]:
    """Part 4, ``batch_sizes: auto`` against fake devices, and a real search if asked."""
    heading("4. batch_sizes: auto (search against fake devices of known limit)")
    au = auto_search(args)
    measured = f"bound{au['worst_over']:+d} trials, {100 * au['worst_error']:.2f}% low"
    target = f"<= bound, <= {100 * SEARCH_TOLERANCE:.0f}% low"
    rows: list[Row] = [("auto: trials vs ceil(log2 L)+4, error", measured, target, au["ok"])]
    if args.real_maxbatch:
        rm = real_maxbatch(args)
        measured = f"{rm['trials']} trials (limit {rm['limit']})"
        rows.append(("auto: real CPU maxbatch", measured, f"<= {rm['bound']}", rm["ok"]))
    return rows


def main(argv: list[str], description: str) -> int:
    args = parse_args(argv, description)
    noisy: set[str] = set()  # goals whose verdict the machine's noise decides
    table = ab_rows(args, noisy) + fixed_cost_rows(args) + sweep_rows(args) + search_rows(args)
    heading("goals (issue 3)")
    w0, w1, w2 = (max(len(row[i]) for row in table) for i in range(3))
    print(f"{'goal':<{w0}}  {'measured':<{w1}}  {'target':<{w2}}  result")
    for goal, value, target, ok in table:
        print(f"{goal:<{w0}}  {value:<{w1}}  {target:<{w2}}  {verdict(ok, goal in noisy)}")
    if noisy:
        print("* the rounds spread wider than the margin judged: rerun with more --rounds")
    return 0
