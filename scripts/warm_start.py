"""Fresh processes against a warm interpreter (issue 23, point 4: cheaper runs): what a bench
job would cost, and measure, if it were forked from a process that has already imported torch,
torchvision and batchscope.bench, instead of starting a new interpreter.

Per point of the default sweep, runs go A B A B (which side goes first alternates): A is the
job as the workflow runs it (``python -m batchscope.bench SPEC`` in a fresh process), B the same
job's ``main`` in a child forked from this process, which imported those modules once. Prints
per point and side the medians of the job's wall time (from the start of the command or the
fork to its end), its import time (``phase_startup_s``), ``samples_per_s`` and ``peak_mem_mb``,
and the spread of log ``samples_per_s`` over the runs (the sd the verdict pools): whether the
warm side measures the same and spreads as much, i.e. whether its runs are as independent.

    .venv/bin/python scripts/warm_start.py                   # 8 runs of 2 points (~4 min)
    .venv/bin/python scripts/warm_start.py --runs 4 --points infer:32:0

A probe, not a feature: the workflow always starts a fresh process. It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import job_cost
from sweeps import REPO, median

ROWS = ("wall_s", "phase_startup_s", "samples_per_s", "peak_mem_mb")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=8, help="runs per point and side")
    p.add_argument("--points", nargs="+", default=["train:32:0", "infer:256:0"],
                   help="mode:batch:workers of the default sweep")  # fmt: skip
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    return p.parse_args(argv)


def fresh(spec: Path, out: Path, threads: int) -> float:
    """One job in a new interpreter, as job_cost.py runs it (``out``: ``<folder>/results/<name>``);
    its wall seconds."""
    folder, options = out.parent.parent, argparse.Namespace(threads=threads)
    return job_cost.run_job(spec, REPO, folder, out.name, options)["outside_s"]


def forked(spec: Path, out: Path, threads: int) -> float:
    """One job's ``main`` in a child of this (warm) process; its wall seconds."""
    from batchscope.bench import job

    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: the job, then out without running this process's exit code
        code = 1
        try:
            with open(os.devnull, "w") as quiet:
                os.dup2(quiet.fileno(), 1)
                os.dup2(quiet.fileno(), 2)
            code = job.main(job_cost.job_args(spec, out, threads)) or 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{out.name}: the forked job failed ({status})")
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
    started = time.perf_counter()
    import torch  # noqa: F401  the warm side's imports, once
    import torchvision  # noqa: F401

    from batchscope.bench import job, runner  # noqa: F401

    print(f"this process imported torch, torchvision, batchscope.bench in"
          f" {time.perf_counter() - started:.2f} s; folder {folder}", flush=True)  # fmt: skip
    sides: dict[str, Callable[[Path, Path, int], float]] = {"fresh": fresh, "warm": forked}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for i in range(args.runs):
        for point, spec in specs.items():
            order = list(sides) if i % 2 == 0 else list(sides)[::-1]
            for side in order:
                out = folder / "results" / f"{point.replace(':', '_')}_{side}_{i}"
                out.parent.mkdir(parents=True, exist_ok=True)
                got = figures(sides[side](spec, out, args.threads), out)
                runs.setdefault((point, side), []).append(got)
                print(f"run {i + 1} {point:<12} {side:<6} {got['wall_s']:6.2f} s,"
                      f" {got['samples_per_s']:7.0f} samples/s", flush=True)  # fmt: skip
    print_table(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
