"""What one benchmark job costs, and where its time goes (issue 23, point 4: cheaper runs).

Runs ``python -m batchscope.bench SPEC`` in fresh processes, as the workflow does, for a few
representative grid points of the default sweep (config/config.yaml with the schema's
defaults, plus ``--set`` overrides), and prints per point the median of each phase of the
job's process (the ``phase_*_s`` keys of its result, docs/results.md "Where a job's time
goes"), ``process_s``, the whole command seen from outside (exit included), ``measured_s`` and
the share of the command outside the measured steps. Runs go point after point, round after
round (A B C A B C ...), so the machine's drift falls on every point alike.

    .venv/bin/python scripts/job_cost.py                          # 5 runs of 4 points, round 1
    .venv/bin/python scripts/job_cost.py --runs 3 --round 2       # a later round's cost
    .venv/bin/python scripts/job_cost.py --set measure.min_seconds=0.5
    .venv/bin/python scripts/job_cost.py --checkout before=/tmp/old --checkout after=.

With several ``--checkout LABEL=DIR`` (each a copy of this repository), every run of a point
goes through each checkout in turn (A B A B ...), the specs built here, and the table gets a
column per checkout. It asserts nothing and exits 0 (a failed job stops it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sweeps import REPO, load_config, median, subprocess_env

from batchscope.bench.jobtime import PHASES  # no torch: the job's phases

#: mode:batch_size:num_workers of the default points.
DEFAULT_POINTS = ("train:32:0", "train:256:2", "infer:32:2", "infer:256:0")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5, help="fresh jobs per point (and checkout)")
    p.add_argument("--points", nargs="+", default=list(DEFAULT_POINTS), help="mode:batch:workers")
    p.add_argument("--model", default="small_cnn")
    p.add_argument("--round", type=int, default=1, help="the specs' round (1: the first)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override, dotted key and YAML value; repeatable")  # fmt: skip
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="--threads of jobs")
    p.add_argument("--checkout", action="append", default=[], metavar="LABEL=DIR",
                   help="a copy of this repository to run the jobs with; repeatable")  # fmt: skip
    p.add_argument("--workdir", type=Path, default=None, help="folder for data, specs, results")
    p.add_argument("--json", type=Path, default=None, help="also write every run's figures here")
    return p.parse_args(argv)


def completed_config(overrides: list[str]) -> dict[str, Any]:
    """The default sweep with ``overrides`` set, checked against the schema, defaults filled."""
    from batchscope.core import config

    try:
        return config.completed(config.with_overrides(load_config(), overrides))
    except config.ConfigError as error:
        raise SystemExit(f"--set: {error}") from None


def write_specs(cfg: dict, args: argparse.Namespace, folder: Path) -> dict[str, Path]:
    """One spec per point, as the workflow's spec rule builds it (seed: the sweep's first)."""
    from batchscope.core import spec

    specs = {}
    for point in args.points:
        mode, batch, workers = point.split(":")
        run = spec.build(
            cfg, mode=mode, model=args.model, batch_size=int(batch), num_workers=int(workers),
            seed=cfg["seeds"][0], round=args.round,
        )  # fmt: skip
        path = folder / "specs" / f"{mode}_bs{batch}_nw{workers}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(run.to_json())
        specs[point] = path
    return specs


def prepare_data(cfg: dict, folder: Path) -> None:
    """The dataset in ``folder``'s resources/, as the workflow's download rule leaves it."""
    from batchscope.core import datasets, paths

    name = cfg["dataset"]["name"]
    if name == "synthetic" or datasets.is_tokens(name):
        return
    cmd = [sys.executable, "-m", "batchscope.bench.download", "--dataset", name]
    cmd += ["--root", str(folder / paths.DATASET_DIR.format(dataset=name))]
    for mirror in cfg["dataset"].get("mirrors", []):
        cmd += ["--mirror", mirror]
    subprocess.run(cmd, check=True, cwd=folder, env=subprocess_env(), capture_output=True)


def job_args(spec: Path, out: Path, threads: int) -> list[str]:
    """A bench job's arguments, as the workflow's bench rule gives them: its result and steps
    are ``out`` with ``.json`` and ``.steps.csv``."""
    return [str(spec), "--threads", str(threads), "--output", f"{out}.json",
            "--steps", f"{out}.steps.csv"]  # fmt: skip


def run_job(spec: Path, checkout: Path, folder: Path, name: str, args) -> dict[str, Any]:
    """One fresh job, as the workflow's bench rule runs it; its figures."""
    out = folder / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "batchscope.bench", *job_args(spec, out, args.threads)]
    env = {**subprocess_env(checkout), "PYTHONHASHSEED": "0"}
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    outside = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{name}: exited {done.returncode}:\n{done.stderr[-2000:]}")
    result = json.loads(Path(f"{out}.json").read_text())
    figures = {p: result.get(f"phase_{p}_s") for p in PHASES}
    figures.update(process_s=result.get("process_s"), outside_s=outside)
    figures.update(measured_s=result["measured_s"], samples_per_s=result["samples_per_s"])
    figures["foreign_cpu_frac"] = result.get("foreign_cpu_frac")  # another user's load
    if result.get("process_s") is not None:
        figures["exit"] = outside - result["process_s"]
    return figures


ROWS = (*PHASES, "exit", "process_s", "outside_s", "measured_s", "outside share")


def summarise(runs: list[dict]) -> dict[str, float | None]:
    """Medians of each figure over ``runs``, and the share of the command outside the
    measured steps (median of the per-run shares)."""
    out = {row: median([r.get(row) for r in runs]) for row in ROWS[:-1]}
    out["outside share"] = median([1 - r["measured_s"] / r["outside_s"] for r in runs])
    out["samples_per_s"] = median([r["samples_per_s"] for r in runs])
    out["foreign_cpu_frac"] = median([r["foreign_cpu_frac"] for r in runs])
    return out


def print_table(medians: dict[str, dict[str, dict]], labels: list[str], runs: int) -> None:
    """One column per point (and checkout), one row per phase: medians over ``runs`` jobs, s."""
    columns = [(point, label) for point in medians for label in labels]
    width = max(12, *(len(p) + 1 for p, _ in columns))
    print(f"\nmedians over {runs} fresh jobs per column, seconds (the share: a fraction;"
          " foreign_cpu_frac: other processes' share of the machine, 0.5: a core)")  # fmt: skip
    head = "".join(f"{p:>{width}}" for p, _ in columns)
    print(f"{'':<14}{head}")
    if len(labels) > 1:
        print(f"{'':<14}" + "".join(f"{label:>{width}}" for _, label in columns))
    for row in (*ROWS, "samples_per_s", "foreign_cpu_frac"):
        cells = []
        for point, label in columns:
            value = medians[point][label].get(row)
            cells.append(f"{'-':>{width}}" if value is None else f"{value:>{width}.3f}")
        print(f"{row:<14}" + "".join(cells))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    checkouts = {"this": REPO}
    if args.checkout:
        pairs = [text.partition("=") for text in args.checkout]
        checkouts = {label: Path(path).resolve() for label, _, path in pairs}
    cfg = completed_config(args.set)
    folder = args.workdir or Path(tempfile.mkdtemp(prefix="batchscope-job-cost-"))
    folder.mkdir(parents=True, exist_ok=True)
    prepare_data(cfg, folder)
    specs = write_specs(cfg, args, folder)
    print(f"{args.runs} runs of {', '.join(specs)} ({args.model}, round {args.round},"
          f" --threads {args.threads}) through {', '.join(checkouts)}; overrides:"
          f" {args.set or 'none'}; folder {folder}", flush=True)  # fmt: skip
    figures: dict[str, dict[str, list]] = {p: {c: [] for c in checkouts} for p in specs}
    for i in range(1, args.runs + 1):
        for point, spec in specs.items():
            for label, checkout in checkouts.items():
                name = f"{point.replace(':', '_')}_{label}_{i}"
                got = run_job(spec, checkout, folder, name, args)
                figures[point][label].append(got)
                print(f"run {i} {point:<12} {label:<8} outside {got['outside_s']:6.2f} s,"
                      f" measured {got['measured_s']:5.2f} s", flush=True)  # fmt: skip
    medians = {p: {c: summarise(runs) for c, runs in by.items()} for p, by in figures.items()}
    print_table(medians, list(checkouts), args.runs)
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args), "runs": figures}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
