"""Evidence of the design (issue 23, point 7): synthetic sweeps whose true throughputs are known.

    .venv/bin/python scripts/selection_simulation.py                    # every grid x CV, 200 each
    .venv/bin/python scripts/selection_simulation.py --sweeps 50 --cv 0.12 --grid gap5
    .venv/bin/python scripts/selection_simulation.py --grid default-train --cv 0.12 \
        --between-cv 0 0.03 0.06 --skip-old                             # reruns that drift

Each simulated sweep draws every run of a point as ``median * exp(N(0, s))`` with
``s = sqrt(log(1 + cv^2))`` (log-normal run-to-run noise of coefficient of variation ``cv``, one
draw per fresh process), round after round, and decides with

- **new**: this checkout's race and verdict, the code the workflow runs: after each round
  ``batchscope.report.summary.round_decision.decide_round`` and ``apply_budget``; at the end
  ``batchscope.core.verdict.decide`` at the level the looks left and
  ``batchscope.core.recommendation.choose``, with the schema's defaults (``--config KEY=VALUE``
  to override, dotted keys, YAML values);
- **old**: the procedure before issue 23: 3 rounds, after rounds 1 and 2 a race that drops points
  whose doubled one-sided Welch p against the leader (highest median), Holm-adjusted, is at most
  level / 2; at the end the tie set is the leader and every point whose adjusted p exceeds the
  level, and the pick the tie set's least memory (memory grows with the batch; then fewer
  workers).

Figures per grid × CV × procedure: ``P(best)``, the share of sweeps whose pick is a true best;
``P(sep)``, separated with a true best picked; ``P(>margin)``, the pick slower than the best by
more than the margin, in all sweeps and (``claimed``) in sweeps whose verdict claimed it
(separated or equivalent); the mean tie-set size and runs per sweep; device-seconds, runs times
``--run-s`` (new) or ``--old-run-s`` (old): the measured seconds of one bench job of each;
``agree``, over the pairs of consecutive sweeps (1 and 2, 3 and 4, ...) taken as two reruns of
one sweep, the share in which each pick lies in the other's tie set (the stability benchmark's
"agree").

``--between-cv`` adds what one sweep cannot see: every point's throughput moved for the whole
of a sweep by ``exp(N(0, s_b))`` (a machine state that lasts a sweep and slows one batch size
more than another; ``s_b`` from the CV as above), drawn anew for each sweep. The figures still
judge against the unmoved truth, so the column shows what such drift does to the picks and to
the reruns' agreement while each sweep's own model sees only its run-to-run spread.

Grids (``--grid``): ``default-infer`` and ``default-train``, the medians of the default sweep's
8 points as measured on this machine before issue 23 (batch 32-256 × 0/2 workers, samples/s);
``gap5``, the best 5% ahead of 7 equal others (the least favourable configuration of an
indifference zone of 5%). A measurement, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping

import numpy as np
import sweeps  # noqa: F401 - this checkout first on sys.path
from scipy import stats

from batchscope.core import config as configuration
from batchscope.core import recommendation, verdict
from batchscope.report.summary import round_decision as race

#: (batch size, workers) -> median samples/s of the default sweep, measured on this machine with
#: `make run` at the commit before issue 23 (3 rounds per point).
DEFAULT_INFER = {(32, 0): 2840, (32, 2): 1918, (64, 0): 1976, (64, 2): 1975,
                 (128, 0): 2426, (128, 2): 2138, (256, 0): 2092, (256, 2): 2172}  # fmt: skip
DEFAULT_TRAIN = {(32, 0): 1438, (32, 2): 1165, (64, 0): 1371, (64, 2): 1248,
                 (128, 0): 1530, (128, 2): 1167, (256, 0): 1186, (256, 2): 1128}  # fmt: skip
GAP5 = {(b, w): 1000.0 for b in (32, 64, 128, 256) for w in (0, 2)} | {(256, 0): 1050.0}
GRIDS = {"default-infer": DEFAULT_INFER, "default-train": DEFAULT_TRAIN, "gap5": GAP5}
OLD_ROUNDS = 3


def draw(truth: Mapping, points, cv: float, rng: np.random.Generator) -> dict:
    s = math.sqrt(math.log1p(cv * cv))
    return {p: float(truth[p] * math.exp(rng.normal(0.0, s))) for p in points}


def rows_of(truth: Mapping) -> dict:
    """What the pick rule reads: memory grows with the batch, workers as they are."""
    return {p: {"batch_size": p[0], "num_workers": p[1], "peak_mem_mb": 100.0 + p[0]}
            for p in truth}  # fmt: skip


def key(p):
    """A point as report.rounds keys it (mode, model, sequence length, batch, acc, workers, dev)."""
    return ("train", "m", None, p[0], 1, p[1], 1)


def moved(truth: Mapping, between_cv: float, rng: np.random.Generator) -> dict:
    """The throughputs one sweep sees: each point's moved for the sweep (``--between-cv``)."""
    if between_cv <= 0:
        return dict(truth)
    return draw(truth, list(truth), between_cv, rng)


def new_sweep(truth, cv, design, budget_s, run_s, rng) -> dict:
    runs = race.Runs()
    going = list(truth)
    last = 0
    gone: set = set()  # what the looks eliminated: never back in the final tie set
    for round_ in range(1, design.last_round + 1):
        for p, value in draw(truth, going, cv, rng).items():
            k = key(p)
            runs.values.setdefault(k, []).append(value)
            runs.blocks.setdefault(k, []).append(round_)
            runs.measured_in.setdefault(k, set()).add(round_)
            runs.device_s.setdefault(k, []).append(run_s)
        last = round_
        if round_ == design.last_round:
            break
        decision = race.decide_round(runs, round_, design)
        decision = race.apply_budget(decision, runs, round_, budget_s)
        going = [(k[3], k[5]) for k in decision.going_on]
        gone |= {(k[3], k[5]) for k in decision.eliminated}
        if not going:
            break
    values = {(k[3], k[5]): v for k, v in runs.values.items()}
    blocks = {(k[3], k[5]): runs.blocks[k] for k in runs.values}
    found = verdict.decide(
        values, design.level, design.margin, blocks=blocks, level_final=design.final_level(last),
        eliminated=gone,
    )  # fmt: skip
    pick, _ = recommendation.choose(found, rows_of(truth))
    n = sum(len(v) for v in values.values())
    return {"pick": pick, "state": found.verdict, "tie": len(found.tie_set), "runs": n,
            "detectable": found.detectable_diff_frac, "tie_set": set(found.tie_set)}  # fmt: skip


def _holm_doubled(values: Mapping, level: float) -> tuple:
    """The old test: leader by median; doubled one-sided Welch p on logs, Holm-adjusted."""
    order = sorted(values, key=lambda p: -float(np.median(values[p])))
    leader, raw = order[0], {}
    for p in order[1:]:
        t = stats.ttest_ind(np.log(values[leader]), np.log(values[p]), equal_var=False,
                            alternative="greater")  # fmt: skip
        raw[p] = min(1.0, 2.0 * float(t.pvalue))
    adjusted, running = {}, 0.0
    for rank, p in enumerate(sorted(raw, key=raw.get)):
        running = max(running, min(1.0, (len(raw) - rank) * raw[p]))
        adjusted[p] = running
    return leader, order, adjusted


def old_sweep(truth, cv, level, rng) -> dict:
    values = {p: [] for p in truth}
    going = list(truth)
    for round_ in range(1, OLD_ROUNDS + 1):
        for p, value in draw(truth, going, cv, rng).items():
            values[p].append(value)
        if round_ < OLD_ROUNDS and round_ >= 2:  # no test before 2 runs each
            _, _, adjusted = _holm_doubled({p: values[p] for p in going}, level / 2)
            going = [p for p in going if adjusted.get(p, 1.0) > level / 2]
            if len(going) < 2:
                break
    leader, order, adjusted = _holm_doubled(values, level)
    tie = [leader] + [p for p in order[1:] if adjusted[p] > level]
    rows = rows_of(truth)
    pick = min(tie, key=lambda p: (rows[p]["peak_mem_mb"], p[1], -np.median(values[p])))
    state = "separated" if len(tie) == 1 else "tie"
    return {"pick": pick, "state": state, "tie": len(tie), "detectable": None,
            "runs": sum(len(v) for v in values.values()), "tie_set": set(tie)}  # fmt: skip


def summarize(found: list[dict], truth: Mapping, margin: float, run_s: float) -> dict:
    best = max(truth.values())
    slower = [truth[f["pick"]] < best / (1 + margin) for f in found]
    claimed = [f["state"] in ("separated", "equivalent") for f in found]
    right = [truth[f["pick"]] == best for f in found]
    separated = [f["state"] == "separated" for f in found]
    return {
        "P(best)": np.mean(right),
        "P(sep)": np.mean([s and r for s, r in zip(separated, right, strict=True)]),
        "P(>margin)": np.mean(slower),
        "claimed": np.mean([s and c for s, c in zip(slower, claimed, strict=True)]),
        "tie": np.mean([f["tie"] for f in found]),
        "runs": np.mean([f["runs"] for f in found]),
        "device_s": np.mean([f["runs"] for f in found]) * run_s,
        "det<=0.3": np.mean([(f["detectable"] or 9) <= 0.30 for f in found]),
        "agree": np.mean(
            [
                a["pick"] in b["tie_set"] and b["pick"] in a["tie_set"]
                for a, b in zip(found[::2], found[1::2], strict=False)
            ]
        ),  # fmt: skip
        "states": {s: sum(f["state"] == s for f in found) for s in {f["state"] for f in found}},
    }


def design_of(overrides: list[str]) -> tuple[verdict.Design, float | None]:
    schema = configuration.load_schema(configuration.SCHEMA_PATH)
    cfg = configuration.with_overrides(configuration.with_defaults({}, schema), overrides)
    return verdict.Design.from_config(cfg), cfg["sweep"]["budget_s"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sweeps", type=int, default=200, help="simulated sweeps per grid and CV")
    p.add_argument("--cv", type=float, nargs="+", default=[0.02, 0.05, 0.12])
    p.add_argument("--between-cv", type=float, nargs="+", default=[0.0],
                   help="CV of a point's move that lasts one sweep (docstring)")  # fmt: skip
    p.add_argument("--grid", nargs="+", choices=sorted(GRIDS), default=sorted(GRIDS))
    p.add_argument("--run-s", type=float, default=3.3,
                   help="seconds of one bench job (new: a forked run's mean process_s in the"
                        " default sweep, 6 December 2026)")  # fmt: skip
    p.add_argument("--old-run-s", type=float, default=11.75, help="seconds of one (old) job")
    p.add_argument("--config", action="append", default=[], help="KEY=VALUE override")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-old", action="store_true")
    p.add_argument("--look-share", type=float, help="try another verdict.LOOK_SHARE")
    args = p.parse_args(argv)
    if args.look_share is not None:
        verdict.LOOK_SHARE = args.look_share
    design, budget_s = design_of(args.config)
    print(f"new: {design}, budget_s={budget_s}, run_s={args.run_s}; old: {OLD_ROUNDS} rounds,"
          f" run_s={args.old_run_s}; {args.sweeps} sweeps each\n")  # fmt: skip
    print("grid          cv    between proc  P(best) P(sep) P(>margin) claimed  tie   runs"
          "  device_s det<=.3 agree  states")  # fmt: skip
    for name in args.grid:
        truth = GRIDS[name]
        for cv in args.cv:
            for between in args.between_cv:
                seed = [args.seed, int(cv * 1000), len(name), int(between * 1000)]
                rng = np.random.default_rng(seed if between else seed[:3])
                procs = [("new", args.run_s)] + ([] if args.skip_old else [("old", args.old_run_s)])
                for proc, run_s in procs:
                    found = [
                        new_sweep(moved(truth, between, rng), cv, design, budget_s, args.run_s, rng)
                        if proc == "new"
                        else old_sweep(moved(truth, between, rng), cv, design.level, rng)
                        for _ in range(args.sweeps)
                    ]
                    s = summarize(found, truth, design.margin, run_s)
                    print(f"{name:13s} {cv:4.2f}  {between:4.2f}    {proc:4s}  {s['P(best)']:6.2f}"
                          f" {s['P(sep)']:6.2f} {s['P(>margin)']:9.2f} {s['claimed']:7.2f}"
                          f" {s['tie']:5.2f} {s['runs']:6.1f} {s['device_s']:8.0f}"
                          f" {s['det<=0.3']:7.2f} {s['agree']:5.2f}  {s['states']}",
                          flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
