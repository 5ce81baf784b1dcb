"""``train.predict``: steps and seconds to the target at every batch size, from short runs at
every batch size and full-length runs at the calibration size(s) (``train.predict_calibration``).

The math is ``batchscope.core.prediction``; this module reads the sweep's ``summary.csv`` and
``curves.csv``, writes ``results/convergence/prediction.csv`` (one row per mode × model × batch
size, see docs/results.md) and ``convergence_prediction.png``. Per mode × model (training runs
of one DataLoader worker count):

- calibration: the sizes ``core.calibration_sizes`` names for the strategy; every seed's
  full-length run there must have reached the target, else the prediction is one line saying
  so (``note``), never a guess;
- samples_per_s: each batch size's ok short runs in the pooled model of log throughput (its
  geometric mean), which gives the time per update and its interval. The calibration sizes
  have short runs too, after their full-length ones: a full-length run's process, between
  its validations and noise-scale passes, can run the same steps faster than a short run's
  (the prediction benchmark measured up to 1.4x on CPU), and a time per update from it would
  favour its size. A sweep without short runs at a size (one from before they were run there)
  uses that size's full-length runs;
- B_simple early: the noise measurements of every run up to ``predict_steps`` updates, pooled
  (under ``noise_scale`` it is B_noise); late: those of the calibration runs in the last third
  of their steps, near the target (under ``late_noise`` it is B_noise; under the fits, the
  cross-check); the two apart are the drift flag;
- device_seconds: the ``wall_s`` of every run the prediction used;
- measured: seconds and steps to the target where every seed of a batch size reached it
  (the calibration runs here, or every batch size of ``--measured``, another sweep's summary).

Command line::

    python -m batchscope.report.convergence.prediction_table --summary results/summary.csv \\
        --curves results/curves.csv --output results/convergence/prediction.csv \\
        --figure results/convergence/convergence_prediction.png --predict-steps 60 \\
        --calibration noise_scale [--measured other/summary.csv]

Plain pandas and matplotlib, never torch.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from batchscope.core import prediction as core
from batchscope.core import prediction_checks as checks
from batchscope.core import results
from batchscope.core.stats import log_mean_ci
from batchscope.report.convergence.tables import chosen_workers, prepare
from batchscope.report.figures import save_png

#: prediction.csv's columns, in order (docs/results.md describes each).
COLUMNS = [
    "mode",
    "model",
    "effective_batch_size",
    "calibration",
    "predicted_steps_to_target",
    "predicted_steps_low",
    "predicted_steps_high",
    "predicted_seconds_to_target",
    "predicted_seconds_low",
    "predicted_seconds_high",
    "predicted_best",
    "samples_per_s",
    "update_s",
    "update_s_low",
    "update_s_high",
    "s_min",
    "s_min_low",
    "s_min_high",
    "b_noise",
    "b_noise_low",
    "b_noise_high",
    "b_simple_early",
    "b_simple_early_low",
    "b_simple_early_high",
    "pollux_steps_to_target",
    "measured_steps_to_target",
    "measured_seconds_to_target",
    "measured_seconds_low",
    "measured_seconds_high",
    "device_seconds",
    "flags",
    "note",
]

#: The share of a full run's steps at its end whose noise measurements count as "late".
LATE_SHARE = 1 / 3


def _g2_trace(rows: pd.DataFrame, *, by_run: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Unbiased (|G|², tr Σ) of each noise measurement in ``rows`` (McCandlish et al. A.1), or
    with ``by_run`` their sums per run (batch × seed): the same pooled ratio, but a bootstrap
    over them resamples runs, whose measurements are correlated, not single measurements."""
    need = ["noise_sq_small", "noise_sq_big", "noise_scale_batch_small", "noise_scale_batch_big"]
    if rows.empty or any(c not in rows for c in need):
        return np.array([]), np.array([])
    data = rows[need].apply(pd.to_numeric, errors="coerce").dropna()
    data = data[data["noise_scale_batch_big"] > data["noise_scale_batch_small"]]
    small, big = data["noise_scale_batch_small"], data["noise_scale_batch_big"]
    g2 = (big * data["noise_sq_big"] - small * data["noise_sq_small"]) / (big - small)
    trace = (data["noise_sq_small"] - data["noise_sq_big"]) / (1.0 / small - 1.0 / big)
    if by_run:
        runs = [rows.loc[data.index, key] for key in ("effective_batch_size", "seed")]
        g2, trace = g2.groupby(runs).sum(), trace.groupby(runs).sum()
    return g2.to_numpy(float), trace.to_numpy(float)


def _run_curves(curves: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The steps rows of ``runs`` with each run's effective batch, noise batch sizes and
    ``short`` (``prepare``'s)."""
    keys = ["mode", "model", "batch_size", "accumulation_steps", "num_workers", "seed"]
    if curves is None or curves.empty:
        return pd.DataFrame()
    if "round" in curves and "round" in runs:  # a seed's runs in several rounds: each its own
        keys.append("round")
    curves = curves.copy()
    for key in keys[2:]:
        curves[key] = pd.to_numeric(curves.get(key, 1), errors="coerce")
    noise = ["noise_scale_batch_small", "noise_scale_batch_big"]
    runs = runs.reindex(columns=[*keys, "effective_batch_size", "short", *noise])
    rows = curves.merge(runs, on=keys, how="inner")
    rows["step"] = pd.to_numeric(rows["step"], errors="coerce")
    return rows


def schedule_text(rows: pd.DataFrame, lr_decay: str | None) -> str | None:
    """What in the schedule changes with the batch: a warm-up, a decay over the run."""
    parts = []
    warmup = pd.to_numeric(rows.get("lr_warmup_steps", pd.Series(dtype=float)), errors="coerce")
    if warmup.notna().any() and warmup.max() > 0:
        parts.append(f"warm-up {int(warmup.max())} updates")
    if lr_decay and lr_decay != "constant":
        parts.append(f"{lr_decay} decay over each run")
    return ", ".join(parts) or None


def _speeds(runs: pd.DataFrame) -> list[float]:
    """Each run's samples_per_s; a run that reached the target before its windows measured
    any (a few updates) counts samples over seconds to the target, on the same clock."""
    measured = pd.to_numeric(runs.get("samples_per_s"), errors="coerce")
    on_clock = pd.to_numeric(runs.get("samples_to_target"), errors="coerce") / pd.to_numeric(
        runs.get("seconds_to_target"), errors="coerce"
    )
    speeds = measured.where(measured.notna(), on_clock)
    return speeds[np.isfinite(speeds) & (speeds > 0)].tolist()


def _speed_runs(ok: pd.DataFrame, batch: int) -> pd.DataFrame:
    """The ok runs whose throughput times ``batch``'s updates: its short runs, or its
    full-length ones where it has none (a sweep from before the calibration sizes had them)."""
    runs = ok[ok["effective_batch_size"] == batch]
    return runs[runs["short"]] if runs["short"].any() else runs


def _measured(frame: pd.DataFrame) -> dict[int, dict[str, float]]:
    """Per effective batch size whose seeds all reached the target: the mean steps to it, and
    the seconds' geometric mean and Student-t 95% interval on log seconds."""
    out = {}
    for batch, group in frame.groupby("effective_batch_size"):
        if group.empty or not (group["reached"] & (group["status"] == "ok")).all():
            continue
        mean, low, high = log_mean_ci(group["seconds_to_target"].dropna())
        out[int(batch)] = {
            "measured_steps_to_target": float(group["steps_to_target"].mean()),
            "measured_seconds_to_target": mean,
            "measured_seconds_low": low,
            "measured_seconds_high": high,
        }
    return out


def _calibration_steps(runs: pd.DataFrame, cal: Sequence[int]) -> dict[int, list[float]]:
    """Each calibration size's seeds' steps to the target; PredictionError when a seed missed
    it (the prediction is then one line, never a guess)."""
    steps: dict[int, list[float]] = {}
    for b in cal:
        group = runs[runs["effective_batch_size"] == b]
        missed = int((~(group["reached"] & (group["status"] == "ok"))).sum())
        if missed:
            raise core.PredictionError(
                f"{missed} of {len(group)} calibration runs at batch {b} did not reach the target"
            )
        steps[b] = group["steps_to_target"].astype(float).tolist()
    return steps


def _noise_rows(
    curves: pd.DataFrame | None, ok: pd.DataFrame, cal: Sequence[int], predict_steps: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The noise measurements early (every run's first ``predict_steps`` updates) and late (the
    calibration sizes' full-length runs' last third, past ``predict_steps``)."""
    run_rows = _run_curves(curves, ok)
    if run_rows.empty:
        return run_rows, run_rows
    early = run_rows[run_rows["step"] <= predict_steps]
    at_cal = run_rows["effective_batch_size"].isin(cal)
    full = run_rows[at_cal & ~run_rows["short"].astype(bool)]
    last = full.groupby(["effective_batch_size", "seed"])["step"].transform("max")
    late = full[full["step"] > last * (1 - LATE_SHARE)]
    return early, late[late["step"] > predict_steps]


def _caveats(ok: pd.DataFrame, lr_decay: str | None) -> dict[str, Any]:
    """The schedule and BatchNorm flags' inputs."""
    batchnorm = None
    if "batchnorm_layers" in ok:
        layers = pd.to_numeric(ok["batchnorm_layers"], errors="coerce")
        batchnorm = bool(layers.notna().any() and layers.max() > 0)
    return {"schedule": schedule_text(ok, lr_decay), "batchnorm": batchnorm}


def _fill(
    rows: dict[int, dict[str, Any]],
    result: core.Prediction,
    early: checks.NoiseEstimate | None,
    *,
    base_steps: float,
    caveats: dict[str, Any],
    notes: list[str],
) -> None:
    """Write the prediction into each batch size's row."""
    cal = result.calibration
    s_low, s_high = result.s_min_interval or (math.nan, math.nan)
    n_low, n_high = result.b_noise_interval or (math.nan, math.nan)
    e_low, e_high = early.interval if early and early.interval else (math.nan, math.nan)
    for p in result.batches:
        st = p.steps_interval or (math.nan, math.nan)
        sec = p.seconds_interval or (math.nan, math.nan)
        upd = p.update_s_interval or (math.nan, math.nan)
        flags = checks.flags(p.batch, cal, **caveats)
        rows[p.batch].update(
            predicted_steps_to_target=p.steps,
            predicted_steps_low=st[0],
            predicted_steps_high=st[1],
            predicted_seconds_to_target=p.seconds,
            predicted_seconds_low=sec[0],
            predicted_seconds_high=sec[1],
            predicted_best=p.batch == result.best,
            samples_per_s=p.samples_per_s,
            update_s=p.update_s,
            update_s_low=upd[0],
            update_s_high=upd[1],
            s_min=result.line.s_min,
            s_min_low=s_low,
            s_min_high=s_high,
            b_noise=result.line.b_noise,
            b_noise_low=n_low,
            b_noise_high=n_high,
            b_simple_early=early.value if early else math.nan,
            b_simple_early_low=e_low,
            b_simple_early_high=e_high,
            pollux_steps_to_target=(
                checks.pollux_steps(p.batch, early.value, cal[0], base_steps) if early else math.nan
            ),
            flags="; ".join(flags),
            note=" ".join(notes),
        )


def _model_rows(
    model_runs: pd.DataFrame,
    curves: pd.DataFrame | None,
    *,
    predict_steps: int,
    calibration: str,
    lr_decay: str | None,
    measured: dict[int, dict[str, float]],
    own: bool = True,
) -> list[dict[str, Any]]:
    """prediction.csv's rows for one mode × model."""
    mode, model = model_runs["mode"].iloc[0], model_runs["model"].iloc[0]
    runs = model_runs[model_runs["num_workers"] == chosen_workers(model_runs)]
    batches = sorted(int(b) for b in runs["effective_batch_size"].unique())
    cal = core.calibration_sizes(batches, calibration)
    ok = runs[runs["status"] == "ok"]
    full = runs[~runs["short"]]
    device_s = float(pd.to_numeric(runs.get("wall_s"), errors="coerce").sum())
    base = {"mode": mode, "model": model, "device_seconds": device_s, "predicted_best": False}
    rows = {b: dict(base, effective_batch_size=b, calibration=b in cal) for b in batches}
    for b, values in measured.items():
        # this sweep's short runs stop before the target by design: only its full-length runs
        # (or another sweep's, ``own`` False) measure steps to it
        if b in rows and (b in cal or not own):
            rows[b].update(values)
    early_rows, late_rows = _noise_rows(curves, ok, cal, predict_steps)
    noise_rows = {"early": early_rows, "late": late_rows}
    early = checks.pooled_noise_scale(*_g2_trace(early_rows))
    late = checks.pooled_noise_scale(*_g2_trace(late_rows))
    source = core.NOISE_FROM.get(calibration)
    try:
        if source is None and len(cal) < 2:
            raise core.PredictionError("the sweep has fewer than two batch sizes to calibrate on")
        steps = _calibration_steps(full, cal)
        speeds = {b: _speeds(_speed_runs(ok, b)) for b in batches}
        noise = _g2_trace(noise_rows[source], by_run=True) if len(cal) == 1 and source else None
        result = core.predict(steps, speeds, noise=noise, shape=core.SHAPES[calibration])
    except core.PredictionError as exc:
        for row in rows.values():
            row["note"] = f"no prediction: {exc}"
        return list(rows.values())
    caveats = _caveats(ok, lr_decay)
    caveats["drift"] = checks.drift_flag(early, late)
    notes = [checks.cross_check(result, calibration, late), *result.notes]
    if len(result.best_set) > 1:
        others = ", ".join(str(b) for b in result.best_set if b != result.best)
        notes.append(f"The bootstrap also picks {others} as the best in 2.5% or more of resamples.")
    base_steps = float(np.mean(steps[cal[0]]))
    _fill(rows, result, early, base_steps=base_steps, caveats=caveats, notes=notes)
    return list(rows.values())


def predict_frame(
    summary: pd.DataFrame,
    curves: pd.DataFrame | None = None,
    *,
    predict_steps: int,
    calibration: str,
    lr_decay: str | None = None,
    measured: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """prediction.csv as a frame: one row per mode × model × effective batch size. ``measured``
    (another sweep's summary, every batch size run to the target) fills the measured columns;
    without it they come from this sweep's own runs that reached the target."""
    frame = prepare(summary)
    train = frame[frame["mode"] == "train"]
    # short runs stop before the target by design: only full-length runs measure it
    reference = train[~train["short"]] if measured is None else prepare(measured)
    out = []
    for (_mode, model), runs in train.groupby(["mode", "model"], sort=True):
        ref = reference[(reference["mode"] == "train") & (reference["model"] == model)]
        if not ref.empty:
            ref = ref[ref["num_workers"] == chosen_workers(ref)]
        out += _model_rows(
            runs,
            curves,
            predict_steps=predict_steps,
            calibration=calibration,
            lr_decay=lr_decay,
            measured=_measured(ref) if not ref.empty else {},
            own=measured is None,
        )
    return pd.DataFrame(out).reindex(columns=COLUMNS)


def best_line(rows: pd.DataFrame) -> str:
    """One sentence: the predicted best batch size with its interval, or why there is none."""
    if rows.empty:
        return "No prediction."
    best = rows[rows["predicted_best"].astype(str).str.lower() == "true"]
    if best.empty:
        notes = rows["note"].dropna()
        return str(notes.iloc[0]) if len(notes) else "No prediction."
    row = best.iloc[0]
    low, high = row["predicted_seconds_low"], row["predicted_seconds_high"]
    interval = "" if pd.isna(low) else f" [95% {low:.3g}-{high:.3g} s]"
    calibration = rows.loc[rows["calibration"].astype(bool), "effective_batch_size"]
    sizes = ", ".join(str(int(b)) for b in calibration)
    return (
        f"Predicted best batch size (train.predict): {int(row['effective_batch_size'])}, "
        f"{row['predicted_seconds_to_target']:.3g} s to the target{interval}, from full-length "
        f"runs at {sizes} and {row['device_seconds']:.0f} device-seconds in all."
    )


def _cell(value: float, low: float, high: float) -> str:
    if pd.isna(value):
        return ""
    return f"{value:.3g}" + ("" if pd.isna(low) else f" [{low:.3g}-{high:.3g}]")


def document_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The convergence report's table: predicted beside measured, per batch size."""
    out = []
    for row in rows.sort_values("effective_batch_size").to_dict("records"):
        best = " ★" if str(row["predicted_best"]).lower() == "true" else ""
        steps = [row[f"predicted_steps_{k}"] for k in ("to_target", "low", "high")]
        seconds = [row[f"predicted_seconds_{k}"] for k in ("to_target", "low", "high")]
        measured = [row[f"measured_seconds_{k}"] for k in ("to_target", "low", "high")]
        out.append(
            {
                "batch": f"{int(row['effective_batch_size'])}{best}",
                "run": "full" if row["calibration"] else "short",
                "predicted steps [95%]": _cell(*steps),
                "predicted s [95%]": _cell(*seconds),
                "measured s [95%]": _cell(*measured),
                "samples/s": _cell(row["samples_per_s"], math.nan, math.nan),
                "flags": row["flags"] if isinstance(row["flags"], str) else "",
            }
        )
    return pd.DataFrame(out)


def _flag_set(rows: pd.DataFrame) -> list[str]:
    """Every batch size's flags, each once (the phrases are joined by "; ")."""
    phrases = ";".join(rows["flags"].dropna().astype(str)).split(";")
    return sorted({phrase.strip() for phrase in phrases} - {""})


def document_notes(rows: pd.DataFrame) -> list[str]:
    """The prediction's fit, cross-check and caveats, one line each."""
    first = rows.iloc[0]
    if pd.isna(first["s_min"]):
        return [str(first["note"])]
    s_min = _cell(first["s_min"], first["s_min_low"], first["s_min_high"])
    b_noise = _cell(first["b_noise"], first["b_noise_low"], first["b_noise_high"])
    lines = [
        f"Steps curve (train.predict_calibration's shape): S_min {s_min} steps, B_noise "
        f"{b_noise} samples (95% bootstrap).",
        str(first["note"]),
        f"Compute the prediction spent: {first['device_seconds']:.0f} device-seconds (every run's "
        "wall_s).",
    ]
    lines += [f"Flag: {flag}." for flag in _flag_set(rows)]
    return lines


def figure(table: pd.DataFrame):
    """Seconds to the target vs batch size: predicted (line and band) beside measured."""
    models = list(dict.fromkeys(table["model"])) or ["(none)"]
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        rows = table[table["model"] == model].sort_values("effective_batch_size")
        ax.set_title(model)
        ax.set_xlabel("effective batch size")
        ax.set_ylabel("seconds to target")
        predicted = rows.dropna(subset=["predicted_seconds_to_target"])
        if predicted.empty:
            note = rows["note"].dropna()
            ax.text(
                0.5,
                0.5,
                note.iloc[0] if len(note) else "no prediction",
                ha="center",
                va="center",
                wrap=True,
                transform=ax.transAxes,
                fontsize=8,
            )
            continue
        x = predicted["effective_batch_size"].astype(float)
        ax.plot(x, predicted["predicted_seconds_to_target"], "-", color="C0", label="predicted")
        if predicted["predicted_seconds_low"].notna().any():
            ax.fill_between(
                x,
                predicted["predicted_seconds_low"],
                predicted["predicted_seconds_high"],
                color="C0",
                alpha=0.2,
            )
        cal = predicted[predicted["calibration"].astype(bool)]
        ax.plot(
            cal["effective_batch_size"],
            cal["predicted_seconds_to_target"],
            "o",
            mfc="none",
            color="C0",
            label="calibration (full-length runs)",
        )
        best = predicted[predicted["predicted_best"].astype(bool)]
        ax.plot(
            best["effective_batch_size"],
            best["predicted_seconds_to_target"],
            "*",
            ms=14,
            color="C0",
            label="predicted best",
        )
        measured = rows.dropna(subset=["measured_seconds_to_target"])
        if not measured.empty:
            y = measured["measured_seconds_to_target"]
            err = np.vstack(
                [
                    y - measured["measured_seconds_low"].fillna(y),
                    measured["measured_seconds_high"].fillna(y) - y,
                ]
            )
            ax.errorbar(
                measured["effective_batch_size"],
                y,
                yerr=err,
                fmt="s",
                color="C3",
                capsize=3,
                label="measured",
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.report.convergence.prediction_table",
        description="Predicted steps and seconds to the target at every batch size.",
    )
    parser.add_argument("--summary", required=True, help="summary.csv of the predict sweep")
    parser.add_argument("--curves", required=True, help="curves.csv of the same sweep")
    parser.add_argument("--output", required=True, help="prediction.csv to write")
    parser.add_argument("--figure", help="PNG: predicted beside measured seconds to target")
    parser.add_argument(
        "--predict-steps",
        type=int,
        required=True,
        help="updates of the short runs (train.predict_steps)",
    )
    parser.add_argument(
        "--calibration",
        required=True,
        choices=core.STRATEGIES,
        help="train.predict_calibration: which full-length runs pin the curve",
    )
    parser.add_argument("--lr-decay", default=None, help="train.lr_decay (the schedule flag)")
    parser.add_argument("--measured", help="another sweep's summary.csv, run to the target")
    args = parser.parse_args(argv)
    summary = pd.read_csv(args.summary)
    curves = pd.read_csv(args.curves, low_memory=False)
    measured = pd.read_csv(args.measured) if args.measured else None
    table = predict_frame(
        summary,
        curves,
        predict_steps=args.predict_steps,
        calibration=args.calibration,
        lr_decay=args.lr_decay,
        measured=measured,
    )
    results.write_text(args.output, table.to_csv(index=False))
    if args.figure:
        fig = figure(table)
        save_png(fig, Path(args.figure))
        plt.close(fig)
    for _model, rows in table.groupby("model", sort=True):
        print(f"{_model}: {best_line(rows)}")
        for flag in _flag_set(rows):
            print(f"  flag: {flag}")
        note = rows["note"].dropna()
        if len(note):
            print(f"  {note.iloc[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
