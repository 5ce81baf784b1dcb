"""Prediction benchmark (issues 18 and 26): does ``train.predict`` pick the batch size that
reaches the target soonest, and at what share of the full convergence sweep's compute?

Usage (from the repository root):

    .venv/bin/python scripts/prediction_benchmark.py                  # every strategy
    .venv/bin/python scripts/prediction_benchmark.py --calibration late_noise  # one of them
    .venv/bin/python scripts/prediction_benchmark.py --measured DIR   # reuse a finished sweep
    .venv/bin/python scripts/prediction_benchmark.py --measured DIR --calibration corner \
        --predicted DIR2
    .venv/bin/python scripts/prediction_benchmark.py --measured DIR --emulate  # no 2nd sweep
    .venv/bin/python scripts/prediction_benchmark.py --measured DIR --emulate --predict-steps 30

In one run it runs (each in a new temporary folder, kept and printed, unless given a finished
one) the convergence sweep on ``--config`` (default ``config/convergence.yaml``: every batch
size to the target, three seeds) and, for each calibration strategy (``--calibration``, default
all of ``train.predict_calibration``'s), the same config with ``train.predict: true`` and that
strategy (full-length runs at its calibration size(s), short runs at every size), one after the
other on the same machine, then predicts with ``batchscope.report.convergence.prediction_table``
and prints, for each strategy:

- (a) the steps error per batch size against the full sweep's measured steps to the target,
  over the sizes that were predicted, not fitted (the calibration sizes are left out)
  (median and worst, in %; goal: within 25% everywhere, 15% at the median): steps are
  deterministic per seed, so this judges the fit without the clock's noise;
- (b) whether the predicted best batch size lies in the measured tie set for time to target:
  the full sweep's seconds compared with the throughput verdict's test (Hsu's multiple
  comparisons with the best, one variance pooled over the batch sizes;
  ``core.prediction_checks.time_tie_set``) (goal: yes);
- (c) the compute each needed: the sum of its runs' ``wall_s`` (device-seconds) over the full
  sweep's (goal <= 30%), and the same share counted in samples trained (steps × batch), which
  other work on the machine does not change; and each snakemake command's wall time when this
  script ran it.

One table at the end has a row per calibration strategy and model.

``--emulate`` runs no second sweep, and so compares every calibration strategy on the same runs:
the short runs are the measured sweep's own runs read as their first ``predict_steps`` updates
(``--predict-steps`` tries another length) (the prediction already takes only those updates' noise
measurements; a run's samples_per_s is its whole run's rate, which on this project's CPU read
faster than a real short run's, 1.2-1.4x at batch 32, but alike at every size), and the
prediction's compute is estimated as the calibration runs' ``wall_s`` plus every run's
``wall_s`` × predict_steps / its steps, times the short runs' rounds (``train.predict_rounds``;
the calibration sizes' past ``measure.rounds``) over the measured runs' (``measure.rounds``):
quicker, and free of a second sweep's different load, but an estimate of the compute, not a
measurement (and an upper one for the strategies whose short runs measure the throughput
only: those end once their windows are full).

A measurement, not a test: nothing is asserted, the exit status is 0 whatever the figures. The
sweeps' seconds are on a clock that other work on the machine slows: run it on a quiet machine
(the runs measured under foreign load are left out of the measured tie set).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from sweeps import REPO, load_config, run_sweep

from batchscope.core import config as config_module
from batchscope.core.prediction import STRATEGIES
from batchscope.core.prediction_checks import time_tie_set
from batchscope.core.verdict import under_foreign_load
from batchscope.report.convergence.prediction_table import predict_frame

COLUMNS = [
    "effective_batch_size",
    "calibration",
    "predicted_steps_to_target",
    "measured_steps_to_target",
    "predicted_seconds_to_target",
    "predicted_seconds_low",
    "predicted_seconds_high",
    "measured_seconds_to_target",
    "measured_seconds_low",
    "measured_seconds_high",
    "samples_per_s",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO / "config" / "convergence.yaml"))
    parser.add_argument("--measured", type=Path, help="a finished convergence sweep's folder")
    parser.add_argument(
        "--calibration",
        choices=[*STRATEGIES, "all"],
        default="all",
        help="the train.predict_calibration to run a predict sweep for (all: one sweep each)",
    )
    parser.add_argument(
        "--predicted", type=Path, help="a finished train.predict sweep's folder (its --calibration)"
    )
    parser.add_argument("--emulate", action="store_true", help="short runs from the sweep's own")
    parser.add_argument(
        "--predict-steps", type=int, help="with --emulate: short-run updates (default: config's)"
    )
    parser.add_argument("--cores", type=int, default=2)
    return parser.parse_args(argv)


def train_runs(summary: pd.DataFrame) -> pd.DataFrame:
    train = summary[summary["mode"] == "train"].copy()
    train["effective_batch_size"] = train["batch_size"] * train.get("accumulation_steps", 1)
    return train


def train_samples(summary: pd.DataFrame) -> float:
    """The samples the sweep's training runs took: steps run x effective batch size, summed."""
    train = train_runs(summary)
    return float((train["steps_run"] * train["effective_batch_size"]).sum())


def device_seconds(summary: pd.DataFrame) -> float:
    """The sweep's compute: its training runs' own work (wall_s), summed."""
    return float(pd.to_numeric(train_runs(summary)["wall_s"], errors="coerce").sum())


def emulated_cost(
    summary: pd.DataFrame,
    table: pd.DataFrame,
    predict_steps: int,
    short_rounds: tuple[float, float],
) -> tuple[float, float]:
    """--emulate's compute, (wall_s, samples): every run cut to its first ``predict_steps``
    updates (wall_s in proportion) and counted ``short_rounds`` times, (other sizes,
    calibration sizes) (a predict sweep's short runs get train.predict_rounds rounds, the
    calibration sizes' those after measure.rounds, the measured runs one per measure.rounds),
    and the calibration runs whole besides."""
    train = train_runs(summary)
    cal = table[table["calibration"].astype(bool)]
    calibration = set(zip(cal["model"], cal["effective_batch_size"].astype(int), strict=True))
    full = [
        (m, int(b)) in calibration
        for m, b in zip(train["model"], train["effective_batch_size"], strict=True)
    ]
    wall = pd.to_numeric(train["wall_s"], errors="coerce")
    steps = pd.to_numeric(train["steps_run"], errors="coerce")
    whole = pd.Series(full, index=train.index, dtype=float)
    rounds = whole.map({0.0: short_rounds[0], 1.0: short_rounds[1]})
    share = (predict_steps / steps).clip(upper=1.0) * rounds + whole
    samples = steps * train["effective_batch_size"]
    return float((wall * share).sum()), float((samples * share).sum())


def measured_seconds(
    measured: pd.DataFrame, model: str, foreign_cpu_limit: float
) -> dict[int, list[float]]:
    """The measured sweep's seconds to the target per effective batch size, one per seed, where
    every seed of that size reached it ok; runs measured while other processes took more than
    ``foreign_cpu_limit`` of the CPU are left out, as the throughput verdict leaves them out."""
    runs = train_runs(measured)
    runs = runs[runs["model"] == model]
    loaded = runs.get("foreign_cpu_frac", pd.Series(index=runs.index, dtype=float)).map(
        lambda frac: under_foreign_load(frac, foreign_cpu_limit)
    )
    if loaded.any():
        print(f"left out of the measured tie set: {int(loaded.sum())} runs under foreign load")
    runs = runs[~loaded.astype(bool)]
    out = {}
    for batch, group in runs.groupby("effective_batch_size"):
        reached = group["status"].eq("ok") & group["target_reached"].astype(str).str.lower().eq(
            "true"
        )
        if len(group) and reached.all():
            out[int(batch)] = pd.to_numeric(group["seconds_to_target"]).tolist()
    return out


def compare(rows: pd.DataFrame, seconds: dict[int, list[float]]) -> dict:
    """One model's rows against the measured sweep: the steps error per batch size (the steps
    are deterministic per seed, so this judges the fit without the clock's noise), and whether
    the predicted best lies in the measured tie set for time to target (the measured seconds
    compared with the throughput verdict's test). Printed as it goes."""
    with pd.option_context("display.width", 200, "display.precision", 3):
        print(rows[COLUMNS].to_string(index=False))
    first = rows.iloc[0]
    print(f"S_min {first['s_min']:.4g} [{first['s_min_low']:.4g}, {first['s_min_high']:.4g}]"
          f", B_noise {first['b_noise']:.4g} [{first['b_noise_low']:.4g}, "
          f"{first['b_noise_high']:.4g}]")  # fmt: skip
    print(f"note: {first['note']}")
    flags = ";".join(rows["flags"].dropna().astype(str)).split(";")
    for flag in sorted({f.strip() for f in flags} - {""}):
        print(f"flag: {flag}")
    both = rows.dropna(subset=["predicted_steps_to_target", "measured_steps_to_target"])
    # the calibration sizes' steps are fitted, not predicted: judged on the others only
    both = both[~both["calibration"].astype(bool)]
    error = (
        (both["predicted_steps_to_target"] - both["measured_steps_to_target"]).abs()
        / both["measured_steps_to_target"]
    ).set_axis(both["effective_batch_size"].astype(int))
    tie = time_tie_set(seconds) if seconds else ()
    pred = rows[rows["predicted_best"].astype(str).str.lower() == "true"]
    best = int(pred.iloc[0]["effective_batch_size"]) if len(pred) else None
    return {
        "error_median": float(error.median()) if len(error) else np.nan,
        "error_worst": float(error.max()) if len(error) else np.nan,
        "worst_at": int(error.idxmax()) if len(error) else None,
        "predicted_best": best,
        "tie": tie,
        "inside": best in tie if best is not None and tie else None,
    }


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("PASS" if ok else "MISS")


def table_line(strategy: str, model: str, got: dict, device: float, samples: float) -> str:
    """One row of the summary table (the goals: steps within 25% everywhere and 15% at the
    median, the predicted best in the measured tie set, at most 30% of the device-seconds)."""
    median, worst = got["error_median"], got["error_worst"]
    steps_ok = None if np.isnan(worst) else bool(worst <= 0.25 and median <= 0.15)
    tie = ",".join(str(b) for b in got["tie"]) or "-"
    return (
        f"| {strategy} | {model} | {median:.0%} | {worst:.0%} at {got['worst_at']} | "
        f"{verdict(steps_ok)} | {got['predicted_best']} | {tie} | {verdict(got['inside'])} | "
        f"{device:.0%} | {verdict(device <= 0.30)} | {samples:.0%} |"
    )


TABLE_HEADER = (
    "| calibration | model | steps error, median | steps error, worst | steps goal | "
    "predicted best | measured tie set (time to target) | best in tie set | device-s share | "
    "share goal | samples share |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def predict_sweeps(args, config: dict, measured_dir: Path, timings: dict) -> dict[str, Path]:
    """Each strategy's train.predict sweep: the measured one itself under --emulate, the given
    folder with --predicted, else one new sweep per strategy (the config with train.predict
    and that train.predict_calibration)."""
    strategies = STRATEGIES if args.calibration == "all" else (args.calibration,)
    if args.emulate:
        return dict.fromkeys(strategies, measured_dir)
    if args.predicted is not None:
        return {strategies[0]: args.predicted}
    out = {}
    for strategy in strategies:
        train = {**config.get("train", {}), "predict": True, "predict_calibration": strategy}
        path = measured_dir / f"predict-{strategy}.yaml"
        path.write_text(yaml.safe_dump({**config, "train": train}))
        out[strategy], timings[f"predict ({strategy})"] = run_sweep(
            f"predict-{strategy}", args.cores, path
        )
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = load_config(Path(args.config))
    schema = config_module.load_schema(config_module.SCHEMA_PATH)
    completed = config_module.with_defaults(config, schema)  # the schema's defaults
    train, limit = completed["train"], completed["sweep"]["foreign_cpu_limit_frac"]
    if args.predicted is not None and args.calibration == "all":
        raise SystemExit("--predicted needs --calibration: the strategy that sweep ran")
    timings = {}
    measured_dir = args.measured
    if measured_dir is None:
        measured_dir, timings["measured"] = run_sweep("measured", args.cores, Path(args.config))
    predicted = predict_sweeps(args, config, measured_dir, timings)
    predict_steps = args.predict_steps or train["predict_steps"]
    rounds = completed["measure"]["rounds"]
    # the short runs' rounds over the measured runs': other sizes', the calibration sizes'
    last = max(rounds, train["predict_rounds"])
    short_rounds = (last / rounds, (max(last, rounds + 1) - rounds) / rounds)
    measured = pd.read_csv(measured_dir / "results" / "summary.csv")
    spent_m = device_seconds(measured)
    samples_m = train_samples(measured)
    lines = []
    for strategy, predicted_dir in predicted.items():
        summary = pd.read_csv(predicted_dir / "results" / "summary.csv")
        curves = pd.read_csv(predicted_dir / "results" / "curves.csv", low_memory=False)
        table = predict_frame(
            summary,
            curves,
            predict_steps=predict_steps,
            calibration=strategy,
            lr_decay=train.get("lr_decay", "constant"),
            measured=measured,
        )
        out = predicted_dir / "results" / "convergence" / f"prediction_vs_measured_{strategy}.csv"
        out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(out, index=False)
        if args.emulate:
            spent_p, samples_p = emulated_cost(summary, table, predict_steps, short_rounds)
        else:
            spent_p = device_seconds(summary)
            samples_p = train_samples(summary)
        for model, rows in table.groupby("model", sort=True):
            print(f"\n== {strategy}: {model} (table: {out}) ==")
            seconds = measured_seconds(measured, model, limit)
            got = compare(rows, seconds)
            lines.append(table_line(strategy, model, got, spent_p / spent_m, samples_p / samples_m))
    emulated = ", emulated" if args.emulate else ""
    print(f"\nsummary (short runs at most {predict_steps} updates{emulated}; full sweep "
          f"{spent_m:.0f} device-s):")  # fmt: skip
    print(TABLE_HEADER)
    print("\n".join(lines))
    for label, seconds in timings.items():
        print(f"{label} sweep: {seconds:.0f} s of wall time (the whole snakemake command)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
