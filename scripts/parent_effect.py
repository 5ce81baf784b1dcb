"""Are the runs forked from one warm interpreter independent draws? (issue 23, `sweep.launch`)

    .venv/bin/python scripts/parent_effect.py --folder SWEEP            # 6 parents x 3 children
    .venv/bin/python scripts/parent_effect.py --folder SWEEP --parents 4 --children 2 --fresh 0

``SWEEP`` is a folder where a sweep has run (``make run``, or a stability benchmark's rerun): its
``specs/runs/`` and its prepared dataset are reused. For each of ``--parents`` warm interpreters
(each its own ``--fork-group``, as the bench rule gives each round its own), ``--children`` runs
of every ``--point`` (spec names under ``specs/runs/<mode>/<model>/``, round 1), in alternating
order; after each interpreter, one fresh process per point (``--fresh`` of them in all).

Printed per point: each interpreter's geometric mean samples/s, the one-way ANOVA of log
samples_per_s by interpreter (F, p) and its variance components: the sd between children of one
interpreter and the sd between interpreters (method of moments); and the sd over the fresh
processes. A between-interpreter sd well above zero means a sweep that forks every run of a
point from one interpreter measures that interpreter's luck n times. A measurement, not a test:
run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats


def run(folder: Path, spec: Path, launch: str, group: str, out: Path) -> float:
    env = dict(os.environ, PYTHONHASHSEED="0")
    cmd = [sys.executable, "-m", "batchscope.bench.launch", "--launch", launch,
           "--fork-group", group, "batchscope.bench", str(spec), "--threads", "2",
           "--output", str(out), "--steps", str(out.with_suffix(".csv"))]  # fmt: skip
    subprocess.run(cmd, cwd=folder, env=env, check=True, capture_output=True)
    return float(json.loads(out.read_text())["samples_per_s"])


def components(groups: list[list[float]]) -> tuple[float, float, float, float]:
    """F, p, within sd, between sd of log values grouped by interpreter (balanced)."""
    logs = [np.log(g) for g in groups]
    f = stats.f_oneway(*logs)
    n = len(logs[0])
    within = float(np.mean([np.var(g, ddof=1) for g in logs]))
    between = float(n * np.var([g.mean() for g in logs], ddof=1))
    spread = math.sqrt(max(0.0, (between - within) / n))
    return float(f.statistic), float(f.pvalue), math.sqrt(within), spread


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--folder", type=Path, required=True, help="a folder where a sweep ran")
    p.add_argument("--mode", default="train")
    p.add_argument("--model", default="small_cnn")
    p.add_argument("--point", nargs="+", default=["bs256_acc1_nw0_seed0", "bs64_acc1_nw0_seed0"])
    p.add_argument("--parents", type=int, default=6)
    p.add_argument("--children", type=int, default=3)
    p.add_argument("--fresh", type=int, default=6)
    args = p.parse_args(argv)
    specs = {name: args.folder / "specs" / "runs" / args.mode / args.model / f"{name}_round1.json"
             for name in args.point}  # fmt: skip
    for spec in specs.values():
        if not spec.is_file():
            p.error(f"no spec {spec}: run a sweep with that point in --folder first")
    forked: dict[str, list[list[float]]] = {name: [] for name in specs}
    fresh: dict[str, list[float]] = {name: [] for name in specs}
    tag = f"parent-effect-{os.getpid()}"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        for k in range(args.parents):
            for name in specs:
                forked[name].append([])
            group = f"{tag}-{k}"
            for i in range(args.children):
                for name in specs if i % 2 == 0 else reversed(list(specs)):
                    forked[name][-1].append(run(args.folder, specs[name], "warm", group, out))
            if k < args.fresh:
                for name in specs:
                    fresh[name].append(run(args.folder, specs[name], "fresh", "", out))
            print(f"interpreter {k + 1}/{args.parents} done", flush=True)
    for name in specs:
        f, pvalue, within, between = components(forked[name])
        means = [round(math.exp(np.mean(np.log(g)))) for g in forked[name]]
        sd_fresh = "-"
        if len(fresh[name]) > 1:
            sd_fresh = f"{float(np.std(np.log(fresh[name]), ddof=1)):.3f}"
        print(f"{args.mode} {name}: per interpreter {means} samples/s; F {f:.2f}, p {pvalue:.4f};"
              f" sd of log samples_per_s within an interpreter {within:.3f}, between"
              f" interpreters {between:.3f}; fresh {sd_fresh} ({len(fresh[name])})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
