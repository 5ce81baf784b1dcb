"""Prediction benchmark (issue 18): does ``train.predict`` pick the batch size that reaches the
target soonest, and at what share of the full convergence sweep's compute?

Usage (from the repository root):

    .venv/bin/python scripts/prediction_benchmark.py                  # runs both sweeps
    .venv/bin/python scripts/prediction_benchmark.py --measured DIR   # reuse a finished sweep
    .venv/bin/python scripts/prediction_benchmark.py --measured DIR --predicted DIR2
    .venv/bin/python scripts/prediction_benchmark.py --measured DIR --emulate  # no 2nd sweep

In one run it runs (each in a new temporary folder, kept and printed, unless given a finished
one) the convergence sweep on ``--config`` (default ``config/convergence.yaml``: every batch
size to the target, three seeds) and the same config with ``train.predict: true`` (full-length
runs at the smallest and largest batch size, short runs elsewhere), then predicts with
``batchscope.report.prediction`` and prints:

- the Spearman rank correlation of predicted vs measured seconds to the target over the batch
  sizes that both have (goal >= 0.8);
- the predicted and the measured best batch size, and whether the predicted one's measured
  seconds lie within the measured best's 95% interval (goal: yes);
- the compute each needed: the sum of its runs' ``wall_s`` (device-seconds), and the ratio
  (goal <= 25%), and each snakemake command's wall time when this script ran it.

``--emulate`` runs no second sweep: the short runs are the measured sweep's own runs read as
their first ``predict_steps`` updates (the prediction already takes only those updates' noise
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
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from batchscope.report.prediction import predict_frame  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO / "config" / "convergence.yaml"))
    parser.add_argument("--measured", type=Path, help="a finished convergence sweep's folder")
    parser.add_argument("--predicted", type=Path, help="a finished train.predict sweep's folder")
    parser.add_argument("--emulate", action="store_true", help="short runs from the sweep's own")
    parser.add_argument("--cores", type=int, default=2)
    return parser.parse_args(argv)


def run_sweep(config: dict, label: str, cores: int) -> tuple[Path, float]:
    """Run the workflow on ``config`` in a new folder; (folder, seconds of the command)."""
    folder = Path(tempfile.mkdtemp(prefix=f"batchscope-{label}-"))
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    snakemake = shutil.which("snakemake", path=env["PATH"]) or "snakemake"
    cmd = [snakemake, "-s", str(REPO / "Snakefile"), "--directory", str(folder)]
    cmd += ["--configfile", str(folder / "config.yaml"), "--cores", str(cores)]
    print(f"running the {label} sweep: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        print("\n".join(done.stderr.strip().splitlines()[-20:]))
        raise SystemExit(f"the {label} sweep failed (exit {done.returncode}); folder: {folder}")
    print(f"{label} sweep done in {elapsed:.0f} s; folder kept: {folder}", flush=True)
    return folder, elapsed


def device_seconds(summary: pd.DataFrame) -> float:
    """The sweep's compute: its training runs' own work (wall_s), summed."""
    train = summary[summary["mode"] == "train"]
    return float(pd.to_numeric(train.get("wall_s"), errors="coerce").sum())


def emulated_seconds(summary: pd.DataFrame, table: pd.DataFrame) -> float:
    """--emulate's compute: calibration runs whole, the others cut to their first updates."""
    train = summary[summary["mode"] == "train"].copy()
    batch = train["batch_size"] * train.get("accumulation_steps", 1)
    cal = table[table["calibration"].astype(bool)]
    calibration = set(zip(cal["model"], cal["batch_size"].astype(int), strict=True))
    full = [(m, int(b)) in calibration for m, b in zip(train["model"], batch, strict=True)]
    wall = pd.to_numeric(train["wall_s"], errors="coerce")
    steps = pd.to_numeric(train["steps_run"], errors="coerce")
    share = (train["_predict_steps"] / steps).clip(upper=1.0)
    return float(wall.where(full, wall * share).sum())


def spearman(a: pd.Series, b: pd.Series) -> float:
    """Spearman's rank correlation (average ranks on ties)."""
    ra, rb = a.rank().to_numpy(float), b.rank().to_numpy(float)
    return float(np.corrcoef(ra, rb)[0, 1])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = yaml.safe_load(Path(args.config).read_text())
    timings = {}
    measured_dir = args.measured
    if measured_dir is None:
        measured_dir, timings["measured"] = run_sweep(config, "measured", args.cores)
    predicted_dir = measured_dir if args.emulate else args.predicted
    if predicted_dir is None:
        predict_config = {**config, "train": {**config.get("train", {}), "predict": True}}
        predicted_dir, timings["predicted"] = run_sweep(predict_config, "predict", args.cores)

    measured = pd.read_csv(measured_dir / "results" / "summary.csv")
    measured["_predict_steps"] = config.get("train", {}).get("predict_steps", 60)
    summary = pd.read_csv(predicted_dir / "results" / "summary.csv")
    summary["_predict_steps"] = config.get("train", {}).get("predict_steps", 60)
    curves = pd.read_csv(predicted_dir / "results" / "curves.csv", low_memory=False)
    train = config.get("train", {})
    table = predict_frame(
        summary,
        curves,
        predict_steps=train.get("predict_steps", 60),
        lr_decay=train.get("lr_decay", "constant"),
        measured=measured,
    )
    out = predicted_dir / "results" / "convergence" / "prediction_vs_measured.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    print(f"\nprediction beside the measured sweep: {out}")
    columns = [
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
    for model, rows in table.groupby("model", sort=True):
        print(f"\n== {model} ==")
        with pd.option_context("display.width", 200, "display.precision", 3):
            print(rows[columns].to_string(index=False))
        first = rows.iloc[0]
        print(f"S_min {first['s_min']:.4g} [{first['s_min_low']:.4g}, {first['s_min_high']:.4g}]"
              f", B_noise {first['b_noise']:.4g} [{first['b_noise_low']:.4g}, "
              f"{first['b_noise_high']:.4g}]")  # fmt: skip
        print(f"note: {first['note']}")
        flags = sorted(set(";".join(rows["flags"].dropna().astype(str)).split(";")) - {""})
        for flag in flags:
            print(f"flag: {flag.strip()}")
        both = rows.dropna(subset=["predicted_seconds_to_target", "measured_seconds_to_target"])
        if len(both) >= 3:
            rho = spearman(both["predicted_seconds_to_target"], both["measured_seconds_to_target"])
            print(f"Spearman rank correlation, predicted vs measured seconds to target over "
                  f"{len(both)} batch sizes: {rho:.3f} (goal >= 0.8: "
                  f"{'PASS' if rho >= 0.8 else 'MISS'})")  # fmt: skip
        else:
            print(f"Spearman: too few batch sizes with both ({len(both)})")
        if both.empty:
            continue
        best_m = both.loc[both["measured_seconds_to_target"].idxmin()]
        pred = rows[rows["predicted_best"].astype(str).str.lower() == "true"]
        low, high = best_m["measured_seconds_low"], best_m["measured_seconds_high"]
        print(
            f"measured best batch: {int(best_m['batch_size'])}, "
            f"{best_m['measured_seconds_to_target']:.3g} s [95% {low:.3g}-{high:.3g}]"
        )
        if pred.empty:
            print("predicted best batch: none (no prediction)")
        else:
            p = pred.iloc[0]
            m = both[both["batch_size"] == p["batch_size"]]
            measured_at = float(m["measured_seconds_to_target"].iloc[0]) if len(m) else np.nan
            inside = int(p["batch_size"]) == int(best_m["batch_size"]) or low <= measured_at <= high
            print(f"predicted best batch: {int(p['batch_size'])}, predicted "
                  f"{p['predicted_seconds_to_target']:.3g} s [95% {p['predicted_seconds_low']:.3g}"
                  f"-{p['predicted_seconds_high']:.3g}], measured {measured_at:.3g} s: "
                  f"{'within' if inside else 'NOT within'} the measured best's interval "
                  f"({'PASS' if inside else 'MISS'})")  # fmt: skip
    spent_m = device_seconds(measured)
    spent_p = emulated_seconds(summary, table) if args.emulate else device_seconds(summary)
    ratio = spent_p / spent_m if spent_m else np.nan
    print(f"\ncompute: convergence sweep {spent_m:.0f} device-seconds (sum of wall_s), "
          f"prediction {spent_p:.0f}: {ratio:.0%} (goal <= 25%: "
          f"{'PASS' if ratio <= 0.25 else 'MISS'})")  # fmt: skip
    for label, seconds in timings.items():
        print(f"{label} sweep: {seconds:.0f} s of wall time (the whole snakemake command)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
