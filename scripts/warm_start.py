"""Fresh processes against forked ones (issue 23, point 4: cheaper runs): what a bench job costs,
and measures, started as ``sweep.launch: fresh`` (a new interpreter) and as ``sweep.launch:
warm`` (forked from a warm interpreter that imported torch, torchvision and the bench modules
once: batchscope.bench.launch and batchscope.bench.warm).

Per point of the default sweep, runs go A B A B (which side goes first alternates), each the
bench rule's command, ``python -m batchscope.bench.launch --launch SIDE batchscope.bench SPEC``.
Prints per point and side the medians of the command's wall time (what Snakemake's benchmark
file records), its import time (``phase_startup_s``), ``samples_per_s`` and ``peak_mem_mb``,
and the spread of log ``samples_per_s`` over the runs (the sd the verdict pools): whether the
forked side measures the same, holds the same memory and spreads as much, i.e. whether its runs
are as independent. The warm side's first run starts the warm interpreter (its imports).

    .venv/bin/python scripts/warm_start.py                   # 8 runs of 2 points (~3 min)
    .venv/bin/python scripts/warm_start.py --runs 4 --points infer:32:0

It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import job_cost
from sweeps import REPO, median, subprocess_env

ROWS = ("wall_s", "phase_startup_s", "samples_per_s", "peak_mem_mb")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=8, help="runs per point and side")
    p.add_argument("--points", nargs="+", default=["train:32:0", "infer:256:0"],
                   help="mode:batch:workers of the default sweep")  # fmt: skip
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    return p.parse_args(argv)


def run(side: str, spec: Path, out: Path, threads: int) -> float:
    """One job as the bench rule runs it, started ``side`` (fresh or warm); its wall seconds."""
    cmd = [sys.executable, "-m", "batchscope.bench.launch", "--launch", side, "batchscope.bench",
           *job_cost.job_args(spec, out, threads)]  # fmt: skip
    env = {**subprocess_env(REPO), "PYTHONHASHSEED": "0"}
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{out.name}: exited {done.returncode}:\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


def figures(wall_s: float, out: Path) -> dict[str, float]:
    result = json.loads(Path(f"{out}.json").read_text())
    return {"wall_s": wall_s, **{key: result[key] for key in ROWS[1:]}}


def print_table(runs: dict[tuple[str, str], list[dict[str, float]]]) -> None:
    print(f"\n{'point':<14}{'side':<7}" + "".join(f"{r:>17}" for r in ROWS) + f"{'sd log':>9}")
    for (point, side), rows in runs.items():
        cells = "".join(f"{median(r[key] for r in rows):>17.2f}" for key in ROWS)
        sd = statistics.stdev(math.log(r["samples_per_s"]) for r in rows)
        print(f"{point:<14}{side:<7}{cells}{sd:>9.3f}")
    print("medians over the runs; sd log: the sd of log samples_per_s over them")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = job_cost.completed_config([])
    folder = Path(tempfile.mkdtemp(prefix="batchscope-warm-start-"))
    job_cost.prepare_data(cfg, folder)
    specs = job_cost.write_specs(cfg, argparse.Namespace(points=args.points, model="small_cnn",
                                                         round=1), folder)  # fmt: skip
    os.chdir(folder)  # the jobs' relative paths (the dataset) are the workflow's
    sides = ("fresh", "warm")
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for i in range(args.runs):
        for point, spec in specs.items():
            order = list(sides) if i % 2 == 0 else list(sides)[::-1]
            for side in order:
                out = folder / "results" / f"{point.replace(':', '_')}_{side}_{i}"
                out.parent.mkdir(parents=True, exist_ok=True)
                got = figures(run(side, spec, out, args.threads), out)
                runs.setdefault((point, side), []).append(got)
                print(f"run {i + 1} {point:<12} {side:<6} {got['wall_s']:6.2f} s,"
                      f" {got['samples_per_s']:7.0f} samples/s", flush=True)  # fmt: skip
    print_table(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
