"""Turn the sweep's summary table into a recommendation, with its evidence.

``recommend`` picks, per mode x model, the (batch_size, num_workers) with the highest throughput
among runs that finished ok (mean over seeds), compares it with the runner-up against the measured
spread, diagnoses it (input- or compute-bound, and which worker count removed an input stall),
and lists what failed or is missing. ``render_markdown`` and ``render_html`` write the same
content as a document (Markdown for people, standalone HTML for the Snakemake report).

Spread of a configuration, as a percentage of its throughput: with two or more seeds that ran
ok, the half-width of the 95% Student-t confidence interval of the mean over seeds; with one,
the interquartile range of its measurement windows' throughputs (``samples_per_s_iqr``) over
their median (unknown with a single window; results without it fall back to the step-time
IQR over the median step time). The runner-up is "within noise" when its gap to the best is
smaller than the larger of the two spreads.

Time to target: throughput is not the whole answer for training. Given the convergence
report's findings (``convergence.json`` of
``batchscope.report.convergence_report``, ``--convergence``),
each training recommendation also names the batch size with the lowest mean time to the
training target and the learning rate it used, compares it with the throughput pick, and says
where it sits relative to the gradient noise scale B_simple and the knee of the steps curve.

Command line::

    python -m batchscope.report.recommend --summary results/summary.csv \\
        --env results/env/environment.json \\
        --markdown results/recommendation.md --html results/recommendation.html \\
        [--convergence results/convergence/convergence.json]
"""

from __future__ import annotations

import argparse
import html
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from batchscope.core import results
from batchscope.report import aggregate
from batchscope.report.documents import html_page, html_table, markdown_table

#: A rec is made per distinct value of these (dataset is one per model in a usual sweep).
#: One recommendation per distinct value of these: with several ``accumulation_steps`` (a
#: training axis) each value gets its own, as a plot gets its own panel.
GROUP_KEYS = ["mode", "model", "dataset", "accumulation_steps"]

#: Spread (%) above which a measurement is called noisy (STYLE: IQR over 10% of the median).
NOISY_PCT = 10.0

#: Statuses of grid points that have no result at all (their job failed, or never ran).
ABSENT_STATUSES = aggregate.ABSENT_STATUSES

NUMERIC_COLUMNS = (
    "batch_size",
    "num_workers",
    "seed",
    "samples_per_s",
    "samples_per_s_iqr",
    "repeats",
    "step_time_ms_p50",
    "step_time_ms_iqr",
    "peak_mem_mb",
    "data_wait_frac",
    "val_accuracy",
    "final_loss",
    "achieved_tflops",
    "peak_tflops",
    "mfu",
    "flops_per_sample",
)

#: How the spread of a point was measured, as the text says it.
SPREAD_SOURCES = {
    "ci": "95% CI over seeds",
    "window_iqr": "throughput IQR over measurement windows",
    "step_iqr": "step-time IQR",
}

#: Evidence table columns, and how each value is printed.
EVIDENCE_FORMATS = {
    "batch_size": "{:d}",
    "num_workers": "{:d}",
    "seed": "{:d}",
    "status": "{}",
    "samples_per_s": "{:.1f}",
    "window_iqr_pct": "{:.1f}",
    "step_time_ms_p50": "{:.2f}",
    "peak_mem_mb": "{:.0f}",
    "data_wait_frac": "{:.3f}",
    "bound": "{}",
    "val_accuracy": "{:.3f}",
    "final_loss": "{:.4f}",
    "note": "{}",
    "error": "{}",
}
TRAIN_ONLY_COLUMNS = ("val_accuracy", "final_loss")

#: Error messages (a CUDA OOM message is long) are cut to this many characters in the table.
ERROR_CHARS = 80

#: Heading of the time-to-target part of a training recommendation (``--convergence``).
TIME_TO_TARGET = "Time to target"


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _prepare(summary: pd.DataFrame) -> pd.DataFrame:
    """Copy with the numeric columns numeric (absent ones as NaN), ``error`` and ``noisy``
    present, and the diagnosis (``bound``, ``stall_removed_by_workers``) computed afresh."""
    frame = summary.copy()
    frame = aggregate.with_accumulation(frame)
    for column in NUMERIC_COLUMNS:
        frame[column] = pd.to_numeric(frame[column]) if column in frame else float("nan")
    for column in ("error", "noisy"):
        if column not in frame:
            frame[column] = None
    return aggregate.diagnose(frame)


def _spread(row: pd.Series) -> tuple[float | None, str | None]:
    """Spread (%) of one pooled configuration, and how it was measured (a SPREAD_SOURCES key)."""
    if row["n_seeds"] >= 2:
        high = row["samples_per_s_ci95_high"]
        return (None, None) if pd.isna(high) else (100 * (high / row["samples_per_s"] - 1), "ci")
    if pd.notna(row["repeats"]) and row["repeats"] < 2:
        return None, None  # one window: no spread measured
    if pd.notna(row["samples_per_s_iqr"]):
        return 100 * row["samples_per_s_iqr"] / row["samples_per_s"], "window_iqr"
    if pd.notna(row["step_iqr_pct"]):
        return float(row["step_iqr_pct"]), "step_iqr"
    return None, None


def _points(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (batch_size, num_workers) that ran ok, seeds pooled, fastest first."""
    ok = rows[(rows["status"] == "ok") & rows["samples_per_s"].notna()]
    if ok.empty:
        return pd.DataFrame()
    points = (
        ok.assign(step_iqr_pct=100 * ok["step_time_ms_iqr"] / ok["step_time_ms_p50"])
        .groupby(["batch_size", "num_workers"], as_index=False)
        .agg(
            samples_per_s=("samples_per_s", "mean"),
            samples_per_s_min=("samples_per_s", "min"),
            samples_per_s_max=("samples_per_s", "max"),
            n_seeds=("samples_per_s", "size"),
            samples_per_s_iqr=("samples_per_s_iqr", "mean"),
            repeats=("repeats", "min"),
            step_iqr_pct=("step_iqr_pct", "mean"),
            step_time_ms_p50=("step_time_ms_p50", "mean"),
            peak_mem_mb=("peak_mem_mb", "max"),
            data_wait_frac=("data_wait_frac", "mean"),
            val_accuracy=("val_accuracy", "mean"),
            final_loss=("final_loss", "mean"),
            achieved_tflops=("achieved_tflops", "mean"),
            peak_tflops=("peak_tflops", "max"),
            mfu=("mfu", "mean"),
            flops_per_sample=("flops_per_sample", "mean"),
        )
    )
    pooled = aggregate.summarize_points(rows)[
        [
            "batch_size",
            "num_workers",
            "samples_per_s_ci95_low",
            "samples_per_s_ci95_high",
            "noisy",
            "bound",
            "stall_removed_by_workers",
        ]
    ]
    points = points.merge(pooled, how="left", on=["batch_size", "num_workers"])
    failed = rows[rows["status"] != "ok"].groupby(["batch_size", "num_workers"]).size()
    points = points.merge(failed.rename("n_failed").reset_index(), how="left")
    points["n_failed"] = points["n_failed"].fillna(0).astype(int)
    spreads = [_spread(row) for _, row in points.iterrows()]
    points["spread_pct"] = [spread for spread, _ in spreads]
    points["spread_source"] = [source for _, source in spreads]
    return points.sort_values(
        ["samples_per_s", "batch_size", "num_workers"], ascending=[False, True, True]
    ).reset_index(drop=True)


def _point(row: pd.Series) -> dict[str, Any]:
    """A plain dict for one pooled configuration (ints as int, NaN as None)."""
    point = {}
    for key, value in row.items():
        if key in ("batch_size", "num_workers", "n_seeds", "n_failed"):
            point[key] = int(value)
        elif key == "stall_removed_by_workers" and not _is_missing(value):
            point[key] = value if value == aggregate.NO_WORKERS else int(float(value))
        elif isinstance(value, float):
            point[key] = None if math.isnan(value) else float(value)
        else:
            point[key] = None if _is_missing(value) else value
    return point


def _absent_points(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """The grid points without a result (failed job, missing file), in grid order."""
    absent = rows[rows["status"].isin(ABSENT_STATUSES)]
    return [
        {
            "batch_size": int(row["batch_size"]),
            "num_workers": int(row["num_workers"]),
            "seed": int(row["seed"]),
            "status": row["status"],
            "error": None if _is_missing(row["error"]) else str(row["error"]),
        }
        for _, row in absent.sort_values(["batch_size", "num_workers", "seed"]).iterrows()
    ]


def _sorted_sizes(rows: pd.DataFrame, status: str) -> list[int]:
    return sorted({int(b) for b in rows.loc[rows["status"] == status, "batch_size"]})


def _recommend_group(key: tuple, rows: pd.DataFrame) -> dict[str, Any]:
    mode, model, dataset, accumulation = key
    points = _points(rows)
    best = _point(points.iloc[0]) if len(points) else None
    runner_up = _point(points.iloc[1]) if len(points) > 1 else None
    gap_pct = noise_pct = within_noise = None
    if runner_up:
        gap_pct = 100 * (best["samples_per_s"] / runner_up["samples_per_s"] - 1)
        spreads = [p["spread_pct"] for p in (best, runner_up) if p["spread_pct"] is not None]
        noise_pct = max(spreads) if spreads else None
        within_noise = None if noise_pct is None else gap_pct < noise_pct
    best_accuracy = None
    if mode == "train" and len(points) and points["val_accuracy"].notna().any():
        top = _point(points.loc[points["val_accuracy"].idxmax()])
        if (top["batch_size"], top["num_workers"]) != (best["batch_size"], best["num_workers"]):
            best_accuracy = top
    ok_sizes = _sorted_sizes(rows, "ok")
    stall_fixes = _stall_fixes(points, best) if best else []
    rec = {
        "mode": mode,
        "model": model,
        "dataset": dataset,
        "accumulation_steps": int(accumulation),
        "devices": sorted({str(d) for d in rows.get("device", pd.Series()).dropna()}),
        "n_runs": len(rows),
        "n_ok": int((rows["status"] == "ok").sum()),
        "best": best,
        "runner_up": runner_up,
        "gap_pct": gap_pct,
        "noise_pct": noise_pct,
        "within_noise": within_noise,
        "largest_ok_batch_size": ok_sizes[-1] if ok_sizes else None,
        "oom_batch_sizes": _sorted_sizes(rows, "oom"),
        "diverged_batch_sizes": _sorted_sizes(rows, "diverged"),
        "absent_points": _absent_points(rows),
        "stall_fixes": stall_fixes,
        "best_accuracy": best_accuracy,
        "env_mismatch_runs": _env_mismatches(rows),
        "evidence": _evidence(rows, best, runner_up, best_accuracy),
    }
    rec["recommendation"] = _sentence(rec)
    rec["notes"] = _notes(rec)
    return rec


def _stall_fixes(points: pd.DataFrame, best: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Configurations at the best's batch size with fewer workers that were input-bound and
    whose stall the best's worker count removed (the smallest that did)."""
    fixes = []
    same = points[
        (points["batch_size"] == best["batch_size"]) & (points["num_workers"] < best["num_workers"])
    ]
    for _, row in same.sort_values("num_workers").iterrows():
        point = _point(row)
        if point["bound"] == "input" and point["stall_removed_by_workers"] == best["num_workers"]:
            fixes.append(point)
    return fixes


def _env_mismatches(rows: pd.DataFrame) -> int:
    """Runs measured in another environment (rows without a result have no fingerprint)."""
    if "env_matches_capture" not in rows:
        return 0
    return int((rows["env_matches_capture"].astype(str).str.lower() == "false").sum())


def recommend(
    summary_df: pd.DataFrame,
    convergence: Mapping[str, Any] | None = None,
    document: str = "convergence.html",
) -> list[dict[str, Any]]:
    """One recommendation dict per mode x model (x dataset), sorted by those keys.

    Keys: mode, model, dataset, devices, n_runs, n_ok; best and runner_up (pooled configuration
    dicts: batch_size, num_workers, samples_per_s (mean over ok seeds), samples_per_s_min/_max,
    samples_per_s_ci95_low/_high (two or more seeds), samples_per_s_iqr (windows), n_seeds (ok
    seeds), n_failed (runs of it that did not finish ok), spread_pct, spread_source (a
    SPREAD_SOURCES key), noisy, bound, stall_removed_by_workers, step_time_ms_p50, peak_mem_mb
    (max over seeds), data_wait_frac, val_accuracy, final_loss, achieved_tflops, peak_tflops, mfu,
    flops_per_sample; None when absent); gap_pct (best vs runner-up, % of the runner-up);
    noise_pct; within_noise; largest_ok_batch_size; oom_batch_sizes; diverged_batch_sizes;
    absent_points (failed or missing grid points: batch_size, num_workers, seed, status, error);
    stall_fixes (input-bound configurations at the best's batch size whose stall the best's
    worker count removed); best_accuracy (train, only when another configuration than the best);
    env_mismatch_runs; evidence (one dict per run); recommendation (a sentence); notes (more
    sentences); time_to_target (see ``time_to_target``; None unless ``convergence``, the
    convergence report's findings, has the group: training only). ``document`` is where the
    text points for the convergence report.
    """
    if summary_df.empty:
        return []
    frame = _prepare(summary_df)
    recs = [
        _recommend_group(key, rows)
        for key, rows in frame.groupby(GROUP_KEYS, sort=True, dropna=False)
    ]
    groups = {
        (g["mode"], g["model"], g["dataset"], g.get("accumulation_steps", 1)): g
        for g in (convergence or {}).get("groups", [])
    }
    for rec in recs:
        group = groups.get((rec["mode"], rec["model"], rec["dataset"], rec["accumulation_steps"]))
        use = rec["mode"] == "train" and group is not None
        rec["time_to_target"] = time_to_target(rec, group, document) if use else None
    return recs


# --------------------------------------------------------------------------------------------
# Time to target, from the convergence report's findings
# --------------------------------------------------------------------------------------------


def _samples_text(value: float | None) -> str:
    """A batch-size-like number: whole from 10 up, two significant digits below, ∞ for None."""
    if value is None:
        return "∞"
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}"


def _lr(entry: Mapping[str, Any]) -> str:
    lr, base, scaling = entry.get("lr"), entry.get("base_lr"), entry.get("lr_scaling")
    if lr is None:
        return "unknown"
    text = f"{lr:.4g}"
    if scaling and scaling != "none" and base is not None:
        text += f" ({scaling} scaling of base lr {base:.4g})"
    return text


def _batch_text(entry: Mapping[str, Any]) -> str:
    text = f"batch size {entry['batch_size']}"
    if entry["accumulation_steps"] > 1:
        text += f" ({entry['micro_batch_size']} × {entry['accumulation_steps']} accumulated)"
    return text


def _seconds_text(entry: Mapping[str, Any]) -> str:
    seconds = entry["seconds_to_target"]
    if seconds["low"] is None:
        return f"{seconds['mean']:.1f} s (one seed)"
    return f"{seconds['mean']:.1f} s [95% CI {seconds['low']:.1f}, {seconds['high']:.1f}]"


def _same_config(entry: Mapping[str, Any], point: Mapping[str, Any]) -> bool:
    """Whether a convergence batch entry is the throughput point's batch (micro-batch and
    accumulation; the summary's batch_size is the micro-batch)."""
    accumulation = point.get("accumulation_steps") or 1
    return (entry["micro_batch_size"], entry["accumulation_steps"]) == (
        point["batch_size"],
        accumulation,
    )


def _throughput_pick_outcome(point: Mapping[str, Any], group: Mapping[str, Any]) -> str:
    """How the throughput pick's batch size fared against the target, in the convergence runs."""
    entry = next((e for e in group["batches"] if _same_config(e, point)), None)
    if entry is None:
        return f"The convergence runs have no batch size {point['batch_size']} to compare."
    here = _batch_text(entry)
    if entry["all_reached"]:
        return f"At {here} every seed reached the target, in {_seconds_text(entry)}."
    if entry["n_reached"]:
        return (
            f"At {here} only {entry['n_reached']} of {entry['n_seeds']} seeds reached the target."
        )
    if entry["n_failed"] == entry["n_seeds"]:
        return f"At {here} no training run finished ok ({entry['failures']})."
    return f"At {here} no seed reached the target within its training budget."


def time_to_target(
    rec: Mapping[str, Any], group: Mapping[str, Any], document: str
) -> dict[str, Any]:
    """The time-to-target part of a training recommendation, from its convergence findings.

    Keys: ``batch_size`` (the batch size with the lowest mean time to the target, None when no
    batch size reached it in every seed), ``lr`` (the effective learning rate it used),
    ``same_as_throughput`` (whether the throughput pick is that batch size; None when either is
    missing), ``paragraphs`` (the text).
    """
    best, pick = group["best"], rec["best"]
    target = (group.get("target") or {}).get("text", "the training target")
    if best is None:
        return {
            "batch_size": None,
            "lr": None,
            "same_as_throughput": None,
            "paragraphs": [
                f"No time to target to rank the batch sizes by: {group['recommendation']}",
                f"Details: {document}.",
            ],
        }
    steps, samples = best["steps_to_target"]["mean"], best["samples_to_target"]["mean"]
    paragraphs = [
        f"Fastest to the target ({target}): {_batch_text(best)} at learning rate {_lr(best)}, "
        f"{_seconds_text(best)} on the clock (mean over the {best['n_reached']} seeds, "
        f"evaluations excluded; {steps:.0f} steps, {samples:.0f} samples), with "
        f"{group['num_workers']} DataLoader worker(s), among the batch sizes that reached the "
        f"target in every seed ({', '.join(str(b) for b in group['candidates'])})."
    ]
    same = None
    if pick is None:
        paragraphs.append("No configuration ran ok to compare its throughput with.")
    else:
        same = _same_config(best, pick)
        versus = f"the throughput pick ({_config(pick)}, {pick['samples_per_s']:.1f} samples/s)"
        if same:
            paragraphs.append(
                f"It is also {versus}: here the fastest batch per second is also the fastest to "
                "the target."
            )
        else:
            text = (
                f"It differs from {versus}: the fastest batch per second is not the fastest to "
                f"the target. {_throughput_pick_outcome(pick, group)}"
            )
            if pick["num_workers"] != group["num_workers"]:
                text += (
                    f" (The convergence runs used {group['num_workers']} DataLoader worker(s), "
                    f"the throughput pick {pick['num_workers']}.)"
                )
            paragraphs.append(text)
    where = best["position"]["text"]
    bounds = []
    noise = group.get("b_simple")
    if noise is not None and noise["low"] is not None:
        bounds.append(
            f"B_simple 95% interval [{_samples_text(noise['low'])}, {_samples_text(noise['high'])}]"
        )
    knee = group.get("knee")
    if knee is not None and knee["b_noise"] is not None and knee["interval"] is not None:
        low, high = knee["interval"]
        bounds.append(f"knee bootstrap 95% interval [{_samples_text(low)}, {_samples_text(high)}]")
    if bounds:
        joined = "; ".join(bounds)
        where += f" {joined[0].upper()}{joined[1:]}."
    paragraphs.append("Critical batch size: " + where)
    paragraphs.append(
        f"Details: {document} (steps, samples and seconds to the target of every batch size, "
        "B_simple, the knee and the regimes)."
    )
    return {
        "batch_size": best["batch_size"],
        "lr": best["lr"],
        "same_as_throughput": same,
        "paragraphs": paragraphs,
    }


def _config(point: Mapping[str, Any]) -> str:
    return f"batch_size={point['batch_size']}, num_workers={point['num_workers']}"


def _pct(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1f}%"


def _seed_text(point: Mapping[str, Any]) -> str:
    spread = point["spread_pct"]
    if point["n_seeds"] >= 2:
        if point["samples_per_s_ci95_low"] is None:
            return f"mean of {point['n_seeds']} seeds"
        return (
            f"mean of {point['n_seeds']} seeds, 95% CI {point['samples_per_s_ci95_low']:.1f}"
            f"-{point['samples_per_s_ci95_high']:.1f} samples/s (±{_pct(spread)})"
        )
    if point["spread_source"] == "window_iqr":
        return f"1 seed, median of the measurement windows, IQR {_pct(spread)} of the median"
    if point["spread_source"] == "step_iqr":
        return f"1 seed, step-time IQR {_pct(spread)} of the median"
    return "1 seed, one measurement window: spread unknown"


def _sources(*points: Mapping[str, Any] | None) -> str:
    names = [SPREAD_SOURCES[p["spread_source"]] for p in points if p and p["spread_source"]]
    return " and ".join(dict.fromkeys(names))


def _sentence(rec: Mapping[str, Any]) -> str:
    """The one-sentence recommendation (two when the runner-up needs comparing)."""
    best, runner = rec["best"], rec["runner_up"]
    if best is None:
        statuses = [p["status"] for p in rec["absent_points"]]
        return (
            f"No grid point ran ok for {rec['mode']} / {rec['model']} "
            f"({rec['n_runs']} runs: {len(rec['oom_batch_sizes'])} batch size(s) hit OOM, "
            f"{len(rec['diverged_batch_sizes'])} diverged, {statuses.count('failed')} run(s) "
            f"failed, {statuses.count('missing')} missing), so there is no recommendation."
        )
    text = f"Use {_config(best)}: {best['samples_per_s']:.1f} samples/s ({_seed_text(best)})."
    if runner is None:
        return text + " It is the only configuration that ran ok, so nothing was compared."
    versus = f"the runner-up ({_config(runner)}, {runner['samples_per_s']:.1f} samples/s)"
    if rec["within_noise"] is None:
        return text + f" It is {rec['gap_pct']:.1f}% faster than {versus}; spread unknown."
    sources = _sources(best, runner)
    if rec["within_noise"]:
        return text + (
            f" But {versus} is within noise: the gap of {rec['gap_pct']:.1f}% is smaller than "
            f"the measured spread of {rec['noise_pct']:.1f}% ({sources}), so treat them as equal."
        )
    return text + (
        f" It is {rec['gap_pct']:.1f}% faster than {versus}, more than the measured spread "
        f"of {rec['noise_pct']:.1f}% ({sources})."
    )


def _quality(point: Mapping[str, Any]) -> str:
    acc, loss = point.get("val_accuracy"), point.get("final_loss")
    acc_text = "n/a" if acc is None else f"{acc:.3f}"
    loss_text = "n/a" if loss is None else f"{loss:.4f}"
    return f"validation accuracy {acc_text}, final loss {loss_text}"


def _diagnosis(rec: Mapping[str, Any]) -> str:
    """What limits the recommended point, and which worker count removed an input stall."""
    best = rec["best"]
    wait, limit = best["data_wait_frac"], aggregate.INPUT_BOUND_FRAC
    if best["bound"] is None:
        return "Diagnosis: unknown (no data wait measured)."
    if best["bound"] == "input":
        text = (
            f"Diagnosis: input-bound (data wait {wait:.3f} of the step time, over {limit:g}): "
            "the model waits for the input pipeline"
        )
        fixed = best["stall_removed_by_workers"]
        if fixed == aggregate.NO_WORKERS or fixed is None:
            return text + "; no larger worker count measured removed the stall (more workers "
            "or a cheaper input pipeline may help)."
        return text + f"; num_workers={fixed} removed the stall at this batch size."
    text = f"Diagnosis: compute-bound (data wait {wait:.3f} of the step time, at most {limit:g})"
    fixes = rec["stall_fixes"]
    if fixes:
        before = ", ".join(
            f"num_workers={p['num_workers']} (data wait {p['data_wait_frac']:.3f})" for p in fixes
        )
        verb = "was" if len(fixes) == 1 else "were"
        return text + (
            f"; at this batch size {before} {verb} input-bound, and "
            f"num_workers={best['num_workers']} removed the stall."
        )
    return text + "."


def _compute_note(best: Mapping[str, Any]) -> str | None:
    """Achieved TFLOP/s and model FLOPs utilisation at the recommended point, when measured."""
    achieved, mfu = best.get("achieved_tflops"), best.get("mfu")
    if achieved is None and mfu is None:
        return None
    parts = []
    if achieved is not None:
        parts.append(f"{achieved:.3g} TFLOP/s achieved")
    if mfu is not None:
        peak = best.get("peak_tflops")
        of_peak = f" of the {peak:.3g} TFLOP/s peak" if peak is not None else ""
        parts.append(f"MFU {100 * mfu:.1f}%{of_peak}")
    return "Compute at the recommended point: " + ", ".join(parts) + "."


def _absent_note(rec: Mapping[str, Any]) -> str | None:
    """One sentence listing the grid points without a result, with each one's error."""
    absent = rec["absent_points"]
    if not absent:
        return None
    items = []
    for point in absent:
        item = (
            f"batch_size={point['batch_size']}, num_workers={point['num_workers']}, "
            f"seed {point['seed']}: {point['status']}"
        )
        error = point["error"]
        if error:
            cut = error if len(error) <= ERROR_CHARS else error[: ERROR_CHARS - 3] + "..."
            item += f" ({cut})"
        elif point["status"] == aggregate.MISSING:
            item += " (no result, no log)"
        items.append(item)
    return (
        f"Not measured: {len(absent)} of {rec['n_runs']} grid points failed or are missing, so "
        f"the recommendation is among those that finished: {'; '.join(items)}."
    )


def _notes(rec: Mapping[str, Any]) -> list[str]:
    """Supporting facts, one sentence each."""
    notes = []
    absent = _absent_note(rec)
    if absent:
        notes.append(absent)
    largest = rec["largest_ok_batch_size"]
    notes.append(
        f"Largest batch size that ran ok: {largest}." if largest else "No batch size ran ok."
    )
    for status, label in (("oom", "Out of memory (OOM)"), ("diverged", "Diverged")):
        sizes = rec[f"{status}_batch_sizes"]
        if sizes:
            notes.append(f"{label} at batch size(s): {', '.join(str(s) for s in sizes)}.")
    best = rec["best"]
    if best:
        mem = "n/a" if best["peak_mem_mb"] is None else f"{best['peak_mem_mb']:.0f} MB"
        wait = best["data_wait_frac"]
        wait_text = "n/a" if wait is None else f"{wait:.3f} of the step time"
        notes.append(f"At the recommended point: peak memory {mem}, data wait {wait_text}.")
        notes.append(_diagnosis(rec))
        compute = _compute_note(best)
        if compute:
            notes.append(compute)
        if best["n_failed"]:
            notes.append(
                f"Caution: {best['n_failed']} other run(s) of the recommended configuration "
                "(other seeds) did not finish ok; see the evidence table."
            )
        if best["spread_pct"] is not None and best["spread_pct"] > NOISY_PCT:
            notes.append(
                f"Its spread ({best['spread_pct']:.1f}%, {SPREAD_SOURCES[best['spread_source']]}) "
                f"is over {NOISY_PCT:.0f}%: a noisy measurement; more measured steps or seeds "
                "would firm it up."
            )
        if rec["mode"] == "train":
            notes.append(f"Model quality at the recommended point: {_quality(best)}.")
    top = rec["best_accuracy"]
    if top:
        slower = 100 * (1 - top["samples_per_s"] / best["samples_per_s"])
        notes.append(
            f"Best validation accuracy is at {_config(top)}: {_quality(top)}; "
            f"{top['samples_per_s']:.1f} samples/s, {slower:.1f}% slower than the recommended "
            "point."
        )
    if rec["env_mismatch_runs"]:
        notes.append(
            f"{rec['env_mismatch_runs']} run(s) were measured in another environment than the "
            "captured one (env fingerprint differs)."
        )
    return notes


def _evidence(rows: pd.DataFrame, best, runner_up, best_accuracy) -> list[dict[str, Any]]:
    """Every run of the group (failed and missing ones too), with its throughput windows' IQR
    in % of the median and a note on the chosen ones."""
    labels: dict[tuple, list[str]] = {}
    for name, point in (("best", best), ("runner-up", runner_up), ("best accuracy", best_accuracy)):
        if point:
            labels.setdefault((point["batch_size"], point["num_workers"]), []).append(name)
    table = rows.sort_values(["batch_size", "num_workers", "seed"]).assign(
        window_iqr_pct=lambda d: 100 * d["samples_per_s_iqr"] / d["samples_per_s"]
    )
    evidence = []
    for _, row in table.iterrows():
        entry = {c: row[c] for c in EVIDENCE_FORMATS if c in row.index}
        entry = {k: None if _is_missing(v) else v for k, v in entry.items()}
        ok = row["status"] == "ok"
        grid = (int(row["batch_size"]), int(row["num_workers"]))
        entry["note"] = ", ".join(labels.get(grid, [])) if ok else ""
        evidence.append(entry)
    return evidence


def _evidence_table(rec: Mapping[str, Any]) -> pd.DataFrame:
    """The evidence as a frame of display strings ("-" where there is no value)."""
    columns = [c for c in EVIDENCE_FORMATS if rec["mode"] == "train" or c not in TRAIN_ONLY_COLUMNS]
    rows = []
    for entry in rec["evidence"]:
        row = {}
        for column in columns:
            value = entry.get(column)
            if _is_missing(value) or value == "":
                row[column] = "-"
            elif EVIDENCE_FORMATS[column] == "{:d}":
                row[column] = str(int(value))
            elif column == "error" and len(str(value)) > ERROR_CHARS:
                row[column] = str(value)[: ERROR_CHARS - 3] + "..."
            else:
                row[column] = EVIDENCE_FORMATS[column].format(value)
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def _title(rec: Mapping[str, Any]) -> str:
    title = f"{rec['mode']} / {rec['model']} ({rec['dataset']})"
    if rec["accumulation_steps"] != 1:
        steps = rec["accumulation_steps"]
        title += f", {steps} accumulation steps (effective batch = batch_size × {steps})"
    return title


def _header(recs: Sequence[Mapping[str, Any]], env: Mapping[str, Any]) -> list[tuple[str, str]]:
    devices = sorted({d for rec in recs for d in rec["devices"]})
    device = str(env.get("device_name", "unknown"))
    if devices:
        device += f" ({', '.join(devices)})"
    return [
        ("Environment fingerprint", str(env.get("fingerprint", "unknown"))),
        ("Device", device),
        ("torch", str(env.get("torch", "unknown"))),
    ]


def render_markdown(recs: Sequence[Mapping[str, Any]], env: Mapping[str, Any]) -> str:
    """The recommendation as a Markdown document."""
    lines = ["# batchscope recommendation", ""]
    lines += [f"- {name}: `{value}`" for name, value in _header(recs, env)]
    lines.append("")
    if not recs:
        lines += ["No results in this sweep.", ""]
    for rec in recs:
        lines += [f"## {_title(rec)}", "", rec["recommendation"], ""]
        lines += [f"- {note}" for note in rec["notes"]]
        lines.append("")
        if rec.get("time_to_target"):
            lines += [f"### {TIME_TO_TARGET}", ""]
            for paragraph in rec["time_to_target"]["paragraphs"]:
                lines += [paragraph, ""]
        lines += ["Evidence (every grid point):", "", markdown_table(_evidence_table(rec)), ""]
    return "\n".join(lines)


def render_html(recs: Sequence[Mapping[str, Any]], env: Mapping[str, Any]) -> str:
    """The recommendation as a standalone HTML page (same content as the Markdown)."""
    esc = html.escape
    parts = [
        "<h1>batchscope recommendation</h1>",
        "<ul>",
        *[f"<li>{esc(name)}: <code>{esc(value)}</code></li>" for name, value in _header(recs, env)],
        "</ul>",
    ]
    if not recs:
        parts.append("<p>No results in this sweep.</p>")
    for rec in recs:
        parts += [
            f"<h2>{esc(_title(rec))}</h2>",
            f'<p class="rec">{esc(rec["recommendation"])}</p>',
            "<ul>",
            *[f"<li>{esc(note)}</li>" for note in rec["notes"]],
            "</ul>",
        ]
        if rec.get("time_to_target"):
            parts.append(f"<h3>{esc(TIME_TO_TARGET)}</h3>")
            parts += [f"<p>{esc(p)}</p>" for p in rec["time_to_target"]["paragraphs"]]
        parts += [
            "<p>Evidence (every grid point):</p>",
            html_table(_evidence_table(rec)),
        ]
    return html_page("batchscope recommendation", parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.report.recommend",
        description="Recommend a batch size and worker count from the sweep's summary.",
    )
    parser.add_argument(
        "--summary", required=True, help="summary CSV from batchscope.report.aggregate"
    )
    parser.add_argument("--env", required=True, help="captured environment JSON")
    parser.add_argument("--markdown", required=True, help="output Markdown file")
    parser.add_argument("--html", required=True, help="output HTML file")
    parser.add_argument(
        "--convergence",
        help="convergence.json of batchscope.report.convergence_report: adds, per training group, "
        "the batch size with the lowest time to the target",
    )
    args = parser.parse_args(argv)

    convergence, document = None, "convergence.html"
    if args.convergence:
        convergence = results.read_json(args.convergence)
        path = Path(args.convergence)
        document = str(path.with_name(convergence.get("document") or path.stem + ".html"))
    recs = recommend(pd.read_csv(args.summary), convergence, document)
    env = results.read_json(args.env)
    results.write_text(args.markdown, render_markdown(recs, env))
    results.write_text(args.html, render_html(recs, env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
