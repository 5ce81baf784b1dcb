"""The configurations a recommendation compares: each (batch_size, num_workers) of a mode x
model that ran ok, its seeds pooled, with its measured spread and diagnosis.

Spread of a configuration, as a percentage of its throughput: with two or more seeds that ran ok,
the half-width of the 95% Student-t confidence interval of the mean over seeds (from
``batchscope.report.summary.point_table.summarize_points``); with one, the interquartile range of
its measurement windows' throughputs (``samples_per_s_iqr``) over their median (unknown with a
single window; results without it fall back to the step-time IQR over the median step time).

Plain pandas: no plotting, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from batchscope.core.results import is_missing
from batchscope.report.summary import diagnosis, point_table, result_files

#: Statuses of grid points that have no result at all (their job failed, or never ran).
ABSENT_STATUSES = result_files.ABSENT_STATUSES

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
    "ci": "95% interval of the mean over runs (seeds and rounds)",
    "window_iqr": "throughput IQR over measurement windows",
    "step_iqr": "step-time IQR",
}


def prepare(summary: pd.DataFrame) -> pd.DataFrame:
    """Copy with the numeric columns numeric (absent ones as NaN), ``error`` and ``noisy``
    present, and the diagnosis (``bound``, ``stall_removed_by_workers``) computed afresh."""
    frame = summary.copy()
    frame = result_files.with_grid_defaults(frame)
    for column in NUMERIC_COLUMNS:
        frame[column] = pd.to_numeric(frame[column]) if column in frame else float("nan")
    for column in ("error", "noisy"):
        if column not in frame:
            frame[column] = None
    return diagnosis.diagnose(frame)


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


def pooled_points(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (batch_size, num_workers) that ran ok, seeds pooled, fastest first."""
    ok = rows[(rows["status"] == "ok") & rows["samples_per_s"].notna()]
    if ok.empty:
        return pd.DataFrame()
    points = _seed_means(ok)
    pooled = point_table.summarize_points(rows)[
        [
            "batch_size",
            "num_workers",
            "samples_per_s_ci95_low",
            "samples_per_s_ci95_high",
            "samples_per_s_median",
            "samples_per_s_median_ci95_low",
            "samples_per_s_median_ci95_high",
            "samples_per_s_cv",
            "n_rounds",
            "noisy",
            "bound",
            "stall_removed_by_workers",
            "scaling_efficiency",
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


def _seed_means(ok: pd.DataFrame) -> pd.DataFrame:
    """The ok runs' measurements per (batch_size, num_workers), over seeds: mostly means; the
    throughput's range, the fewest windows and the most memory."""
    return (
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


def point_dict(row: pd.Series) -> dict[str, Any]:
    """A plain dict for one pooled configuration (ints as int, NaN as None)."""
    point = {}
    for key, value in row.items():
        if key in ("batch_size", "num_workers", "n_seeds", "n_failed", "n_rounds"):
            point[key] = int(value)
        elif key == "stall_removed_by_workers" and not is_missing(value):
            point[key] = value if value == diagnosis.NO_WORKERS else int(float(value))
        elif isinstance(value, float):
            point[key] = None if math.isnan(value) else float(value)
        else:
            point[key] = None if is_missing(value) else value
    return point


def absent_points(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """The grid points without a result (failed job, missing file), in grid order."""
    absent = rows[rows["status"].isin(ABSENT_STATUSES)]
    return [
        {
            "batch_size": int(row["batch_size"]),
            "num_workers": int(row["num_workers"]),
            "seed": int(row["seed"]),
            "status": row["status"],
            "error": None if is_missing(row["error"]) else str(row["error"]),
        }
        for _, row in absent.sort_values(["batch_size", "num_workers", "seed"]).iterrows()
    ]


def sorted_sizes(rows: pd.DataFrame, status: str) -> list[int]:
    """The batch sizes with a run of ``status``, ascending."""
    return sorted({int(b) for b in rows.loc[rows["status"] == status, "batch_size"]})


def stall_fixes(points: pd.DataFrame, best: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Configurations at the best's batch size with fewer workers that were input-bound and
    whose stall the best's worker count removed (the smallest that did)."""
    fixes = []
    same = points[
        (points["batch_size"] == best["batch_size"]) & (points["num_workers"] < best["num_workers"])
    ]
    for _, row in same.sort_values("num_workers").iterrows():
        point = point_dict(row)
        if point["bound"] == "input" and point["stall_removed_by_workers"] == best["num_workers"]:
            fixes.append(point)
    return fixes


def worker_comparison(points: pd.DataFrame, best: Mapping[str, Any]) -> dict[str, Any] | None:
    """Whether workers helped, at the best's batch size: ``fewest`` is the point with the fewest
    workers when the best has more, and ``more`` the fastest with more workers than the best
    (each a ``point_dict``, or None). None when no other worker count ran at that batch size."""
    same = points[points["batch_size"] == best["batch_size"]]
    fewer = same[same["num_workers"] < best["num_workers"]].sort_values("num_workers")
    more = same[same["num_workers"] > best["num_workers"]]  # fastest first, as ``points``
    if fewer.empty and more.empty:
        return None
    return {
        "fewest": point_dict(fewer.iloc[0]) if len(fewer) else None,
        "more": point_dict(more.iloc[0]) if len(more) else None,
    }


def images_skipped(rows: pd.DataFrame) -> int:
    """Unreadable images an image folder's index left out (every run reads the same index, so
    the largest count over the runs); 0 for other datasets and results without the column."""
    if "images_skipped" not in rows:
        return 0
    counts = pd.to_numeric(rows["images_skipped"], errors="coerce").dropna()
    return int(counts.max()) if len(counts) else 0


def input_pipeline(rows: pd.DataFrame) -> str | None:
    """How an image folder's images were decoded and preprocessed (``decoder pil; resize 256
    (shorter side), center crop 224``), as the runs recorded it; None for other datasets."""
    if "decoder" not in rows:
        return None
    recorded = rows.dropna(subset=["decoder"])
    if recorded.empty:
        return None
    first = recorded.iloc[0]
    steps = first.get("preprocessing")
    return f"decoder {first['decoder']}" + (f"; {steps}" if isinstance(steps, str) else "")


def env_mismatches(rows: pd.DataFrame) -> int:
    """Runs measured in another environment (rows without a result have no fingerprint)."""
    if "env_matches_capture" not in rows:
        return 0
    return int((rows["env_matches_capture"].astype(str).str.lower() == "false").sum())
