"""Part (c) of the stability benchmark: one bench job through the workflow (A) against a bare
PyTorch loop in a fresh process that never imports batchscope (B), pair after pair."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from sweeps import heading, load_config, ratio_summary, snakemake_command, subprocess_env

from stability.sweep import SweepFailed, run_logged, write_config

HARNESS_GOAL = 0.97
#: The command whose ``bare-loop`` is side B.
SCRIPT = Path(__file__).resolve().parents[1] / "stability_benchmark.py"


def part_harness(args: argparse.Namespace, workdir: Path) -> dict:
    b, w = args.harness_batch, args.harness_workers
    heading(f"(c) harness vs bare loop: batch {b}, workers {w}, {args.pairs} pairs per mode")
    folder = workdir / "harness"
    config = load_config()
    config.update(batch_sizes=[b], num_workers=[w], modes=args.harness_modes)
    config.setdefault("measure", {})["ceiling"] = False
    configfile = write_config(folder, config)
    target = {
        mode: f"results/runs/{mode}/small_cnn/bs{b}_acc1_nw{w}_seed0_round1.json"
        for mode in args.harness_modes
    }
    print(
        "A: one bench job through the workflow, `snakemake --force <target>` (samples_per_s of"
        " its result: median of its windows; also measured_samples / measured_s)\n"
        "B: `stability_benchmark.py bare-loop` in a fresh process (no batchscope import),"
        " as many measured steps as the A before it"
    )
    print("preparing (dataset, specs, one unmeasured job per mode) ...", flush=True)
    cmd = snakemake_command(
        folder, args.cores, configfile, list(target.values()), program=args.snakemake
    )
    run_logged(cmd, folder / "prepare.log")
    rows: dict[str, list[dict]] = {mode: [] for mode in args.harness_modes}
    print(
        f"{'mode':<5}  {'pair':>4}  {'A samples/s':>11}  {'A mean/s':>9}  {'B bare/s':>9}"
        f"  {'A/B':>6}  {'Amean/B':>7}  {'steps':>5}  {'A job s':>7}"
    )
    for i in range(1, args.pairs + 1):
        for mode in args.harness_modes:
            rows[mode].append(run_pair(args, folder, configfile, target[mode], mode, i))
    out: dict[str, Any] = {"batch_size": b, "num_workers": w, "pairs": rows, "modes": {}}
    print()
    for mode, mode_rows in rows.items():
        out["modes"][mode] = print_mode(mode, mode_rows)
    return out


def run_pair(
    args: argparse.Namespace, folder: Path, configfile: Path, target: str, mode: str, i: int
) -> dict[str, Any]:
    """Pair ``i`` of ``mode``: A (``target`` forced through the workflow), then B; its row,
    printed."""
    cmd = snakemake_command(
        folder, args.cores, configfile, ["--force", target], program=args.snakemake
    )
    outside = run_logged(cmd, folder / f"a-{mode}-{i}.log")
    result = json.loads((folder / target).read_text())
    if result.get("status") != "ok":
        raise SweepFailed(f"A {mode} pair {i}: status {result.get('status')}")
    spec = json.loads((folder / "specs" / target.removeprefix("results/")).read_text())
    a = float(result["samples_per_s"])
    a_mean = result["measured_samples"] / result["measured_s"]
    bare = run_bare(args, folder, spec, result, mode, i)
    row = {
        "pair": i,
        "a_samples_per_s": a,
        "a_mean_samples_per_s": a_mean,
        "b_samples_per_s": bare["samples_per_s"],
        "steps": result["measured_steps"],
        "warmup": result["warmup_steps"],
        "a_threads": result.get("torch_threads"),
        "b_threads": bare["threads"],
        "a_command_s": outside,
        "b_loaded_batchscope": bare["batchscope_loaded"],
    }
    print(
        f"{mode:<5}  {i:>4}  {a:>11.1f}  {a_mean:>9.1f}  {bare['samples_per_s']:>9.1f}"
        f"  {a / bare['samples_per_s']:>6.3f}  {a_mean / bare['samples_per_s']:>7.3f}"
        f"  {row['steps']:>5}  {outside:>7.1f}",
        flush=True,
    )
    return row


def print_mode(mode: str, rows: list[dict]) -> dict[str, dict]:
    """The median of a mode's per-pair ratios A / B and their spread, printed."""
    ratios = [r["a_samples_per_s"] / r["b_samples_per_s"] for r in rows]
    means = [r["a_mean_samples_per_s"] / r["b_samples_per_s"] for r in rows]
    s, m = ratio_summary(ratios), ratio_summary(means)
    threads = {(r["a_threads"], r["b_threads"]) for r in rows}
    leaked = any(r["b_loaded_batchscope"] for r in rows)
    print(
        f"{mode}: median A/B = {s['median']:.3f}   (the goal: >= {HARNESS_GOAL});"
        f" IQR {s['iqr']:.3f}, min {s['min']:.3f}, max {s['max']:.3f}; with A's"
        f" measured_samples/measured_s: median {m['median']:.3f}; threads A/B {threads};"
        f" B imported batchscope: {'YES' if leaked else 'no'}"
    )
    if s["iqr"] > 1 - HARNESS_GOAL:
        print(
            f"  note: the per-pair ratios spread wider (IQR {s['iqr']:.3f}) than the"
            f" {1 - HARNESS_GOAL:.2f} margin judged: the machine's noise decides this median"
        )
    return {"ratio": s, "ratio_of_means": m}


def run_bare(
    args: argparse.Namespace, folder: Path, spec: dict, result: dict, mode: str, pair: int
) -> dict:
    """Side B in a fresh process: the benchmark's bare-loop, nothing of batchscope on its
    PYTHONPATH."""
    train = spec.get("train") or {}
    cmd = [
        sys.executable,
        str(SCRIPT),
        "bare-loop",
        "--mode", mode,
        "--data-root", str(folder / spec["dataset"]["root"]),
        "--batch-size", str(spec["batch_size"]),
        "--num-workers", str(spec["num_workers"]),
        "--threads", str(args.cores),
        "--seed", str(spec["seed"]),
        "--warmup", str(result["warmup_steps"]),
        "--steps", str(result["measured_steps"]),
        "--lr", str(train.get("lr", 0.05)),
        "--momentum", str(train.get("momentum", 0.9)),
        "--deterministic" if spec.get("deterministic") else "--no-deterministic",
    ]  # fmt: skip
    log = folder / f"b-{mode}-{pair}.log"
    done = subprocess.run(cmd, env=subprocess_env(None), cwd=folder, capture_output=True, text=True)
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SweepFailed(f"bare loop exited {done.returncode}; {log}")
    return json.loads(done.stdout.strip().splitlines()[-1])
