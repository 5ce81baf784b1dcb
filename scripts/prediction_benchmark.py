"""Prediction benchmark (issue 18): does ``train.predict`` pick the batch size that reaches the
target soonest, and at what share of the full convergence sweep's compute?

Usage (from the repository root):

    .venv/bin/python scripts/prediction_benchmark.py                  # runs both sweeps
    .venv/bin/python scripts/prediction_benchmark.py --measured DIR   # reuse a finished sweep
    .venv/bin/python scripts/prediction_benchmark.py --measured DIR --predicted DIR2
    .venv/bin/python scripts/prediction_benchmark.py --measured DIR --emulate  # no 2nd sweep
    .venv/bin/python scripts/prediction_benchmark.py --measured DIR --emulate --predict-steps 30

In one run it runs (each in a new temporary folder, kept and printed, unless given a finished
one) the convergence sweep on ``--config`` (default ``config/convergence.yaml``: every batch
size to the target, three seeds) and the same config with ``train.predict: true`` (full-length
runs at the calibration size(s), short runs elsewhere), then predicts with
``batchscope.report.convergence.prediction_table`` and prints, for each calibration strategy
(``train.predict_calibration``; with a second sweep, only the one it ran):

- the Spearman rank correlation of predicted vs measured seconds to the target over the batch
  sizes that both have (goal >= 0.8);
- the predicted and the measured best batch size, and whether the predicted one's measured
  seconds lie within the measured best's 95% interval (goal: yes);
- the compute each needed: the sum of its runs' ``wall_s`` (device-seconds), and the ratio
  (goal <= 25%), and the same share counted in samples trained (steps × batch), which other
  work on the machine does not change; and each snakemake command's wall time when this script
  ran it.

``--emulate`` runs no second sweep, and so compares every calibration strategy on the same runs:
the short runs are the measured sweep's own runs read as their first ``predict_steps`` updates
(``--predict-steps`` tries another length) (the prediction already takes only those updates' noise
measurements, and a run's samples_per_s is its steady rate, as a short run's), and the
prediction's compute is estimated as the calibration runs' ``wall_s`` plus each other run's
``wall_s`` × predict_steps / its steps: quicker, and free of a second sweep's different load,
but an estimate of the compute, not a measurement.

A measurement, not a test: nothing is asserted, the exit status is 0 whatever the figures. Both
sweeps' seconds are on a clock that other work on the machine slows: run it on a quiet machine,
or read the rank correlation with that in mind.
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
from batchscope.report.convergence.prediction_table import predict_frame

COLUMNS = [
    "batch_size",
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
    parser.add_argument("--predicted", type=Path, help="a finished train.predict sweep's folder")
    parser.add_argument("--emulate", action="store_true", help="short runs from the sweep's own")
    parser.add_argument(
        "--predict-steps", type=int, help="with --emulate: short-run updates (default: config's)"
    )
    parser.add_argument("--cores", type=int, default=2)
    return parser.parse_args(argv)


def train_runs(summary: pd.DataFrame) -> pd.DataFrame:
    train = summary[summary["mode"] == "train"].copy()
    train["batch"] = train["batch_size"] * train.get("accumulation_steps", 1)
    return train


def device_seconds(summary: pd.DataFrame) -> float:
    """The sweep's compute: its training runs' own work (wall_s), summed."""
    return float(pd.to_numeric(train_runs(summary)["wall_s"], errors="coerce").sum())


def emulated_cost(
    summary: pd.DataFrame, table: pd.DataFrame, predict_steps: int
) -> tuple[float, float]:
    """--emulate's compute, (wall_s, samples): calibration runs whole, the others cut to their
    first ``predict_steps`` updates (wall_s in proportion)."""
    train = train_runs(summary)
    cal = table[table["calibration"].astype(bool)]
    calibration = set(zip(cal["model"], cal["batch_size"].astype(int), strict=True))
    full = [(m, int(b)) in calibration for m, b in zip(train["model"], train["batch"], strict=True)]
    wall = pd.to_numeric(train["wall_s"], errors="coerce")
    steps = pd.to_numeric(train["steps_run"], errors="coerce")
    share = (predict_steps / steps).clip(upper=1.0)
    samples = steps * train["batch"]
    return float(wall.where(full, wall * share).sum()), float(
        samples.where(full, samples * share).sum()
    )


def spearman(a: pd.Series, b: pd.Series) -> float:
    """Spearman's rank correlation (average ranks on ties)."""
    ra, rb = a.rank().to_numpy(float), b.rank().to_numpy(float)
    return float(np.corrcoef(ra, rb)[0, 1])


def compare(rows: pd.DataFrame) -> dict:
    """Spearman, and predicted vs measured best, for one model's rows; printed as it goes."""
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
    out = {"rho": np.nan, "measured_best": None, "predicted_best": None, "inside": None}
    both = rows.dropna(subset=["predicted_seconds_to_target", "measured_seconds_to_target"])
    if len(both) >= 3:
        rho = spearman(both["predicted_seconds_to_target"], both["measured_seconds_to_target"])
        out["rho"] = round(rho, 9)  # 0.8 exactly (1 - 6·4/120) is no miss
    if both.empty:
        return out
    best_m = both.loc[both["measured_seconds_to_target"].idxmin()]
    out["measured_best"] = int(best_m["batch_size"])
    pred = rows[rows["predicted_best"].astype(str).str.lower() == "true"]
    if not pred.empty:
        b = int(pred.iloc[0]["batch_size"])
        m = both[both["batch_size"] == b]
        at = float(m["measured_seconds_to_target"].iloc[0]) if len(m) else np.nan
        low, high = best_m["measured_seconds_low"], best_m["measured_seconds_high"]
        out["predicted_best"] = b
        out["inside"] = b == out["measured_best"] or bool(low <= at <= high)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = load_config(Path(args.config))
    schema = config_module.load_schema(config_module.SCHEMA_PATH)
    train = config_module.with_defaults(config, schema)["train"]  # the schema's defaults
    timings = {}
    measured_dir = args.measured
    if measured_dir is None:
        measured_dir, timings["measured"] = run_sweep("measured", args.cores, Path(args.config))
    predicted_dir = measured_dir if args.emulate else args.predicted
    if predicted_dir is None:
        predict_config = {**config, "train": {**train, "predict": True}}
        path = measured_dir / "predict.yaml"
        path.write_text(yaml.safe_dump(predict_config))
        predicted_dir, timings["predicted"] = run_sweep("predict", args.cores, path)
    predict_steps = args.predict_steps or train["predict_steps"]
    measured = pd.read_csv(measured_dir / "results" / "summary.csv")
    summary = pd.read_csv(predicted_dir / "results" / "summary.csv")
    curves = pd.read_csv(predicted_dir / "results" / "curves.csv", low_memory=False)
    strategies = STRATEGIES if args.emulate else (train["predict_calibration"],)
    spent_m = device_seconds(measured)
    samples_m = float((train_runs(measured)["steps_run"] * train_runs(measured)["batch"]).sum())
    lines = []
    for strategy in strategies:
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
            spent_p, samples_p = emulated_cost(summary, table, predict_steps)
        else:
            spent_p = device_seconds(summary)
            samples_p = float(
                (train_runs(summary)["steps_run"] * train_runs(summary)["batch"]).sum()
            )
        for model, rows in table.groupby("model", sort=True):
            print(f"\n== {strategy}: {model} (table: {out}) ==")
            got = compare(rows)
            ratio = spent_p / spent_m
            lines.append(
                f"{strategy:11} {model}: Spearman {got['rho']:.3f}"
                f" ({'PASS' if got['rho'] >= 0.8 else 'MISS'} >= 0.8); best predicted "
                f"{got['predicted_best']} vs measured {got['measured_best']} "
                f"({'PASS' if got['inside'] else 'MISS'}); compute {spent_p:.0f}/{spent_m:.0f} "
                f"device-s = {ratio:.0%} ({'PASS' if ratio <= 0.25 else 'MISS'} <= 25%), "
                f"samples {samples_p / samples_m:.0%}"
            )
    print(f"\nsummary (short runs {predict_steps} updates{', emulated' if args.emulate else ''}):")
    print("\n".join(lines))
    for label, seconds in timings.items():
        print(f"{label} sweep: {seconds:.0f} s of wall time (the whole snakemake command)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
