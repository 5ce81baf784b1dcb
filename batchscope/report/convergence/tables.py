"""The convergence report's tables: a model's training runs, one row per effective batch size,
and the headline gradient noise scale.

From the sweep's ``summary.csv`` (``batchscope.report.summary.aggregate``): ``prepare`` makes the
numbers numeric and adds each run's effective batch size; ``chosen_workers`` picks the one
DataLoader worker count a model's report uses; ``batch_table`` pools each effective batch size's
seeds (steps, samples and seconds to the target with their 95% Student-t interval over the seeds
that reached it, ``batchscope.core.stats.mean_ci``; seconds on their logarithms,
``log_mean_ci``: the geometric mean, an interval above zero); ``noise_scale`` sums up B_simple.
``ModelReport`` holds one model's analysis, which the figures, the words and the findings read;
``run_curves`` picks the per-step rows of its runs from ``curves.csv``.

B_simple = tr(Σ)/|G|² is measured by each training run (``train.noise_scale_every_steps``); the
summary holds each run's estimate at the end of training with a 95% interval. The headline value
of a model is the median over its runs (every batch size and seed), its interval the median of
the runs' lower and upper bounds.

Plain NumPy and pandas: no plotting, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from batchscope.core.stats import finite, log_mean_ci, mean_ci
from batchscope.report.convergence.fits import REGIMES, Knee
from batchscope.report.summary.result_files import with_grid_defaults

#: The quantities to the target, by the summary column that holds each.
QUANTITIES = {"steps": "steps_to_target", "samples": "samples_to_target"}
QUANTITIES["seconds"] = "seconds_to_target"

#: Summary columns read as numbers (a missing or unparsable cell becomes NaN).
NUMERIC = (
    "batch_size",
    "num_workers",
    "seed",
    "accumulation_steps",
    "steps_run",
    "samples_per_s",
    "target",
    "steps_to_target",
    "samples_to_target",
    "seconds_to_target",
    "best_val_metric",
    "lr",
    "base_lr",
    "noise_scale_b_simple",
    "noise_scale_ci95_low",
    "noise_scale_ci95_high",
    "noise_scale_measurements",
    "noise_scale_batch_small",
    "noise_scale_batch_big",
)


def _truthy(value: Any) -> bool:
    """A CSV cell as a boolean: True/true/1 (pandas may read the column as text or numbers)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    return str(value).strip().lower() in ("true", "1", "1.0")


# --------------------------------------------------------------------------------------------
# The runs of a model, and its per-batch-size table
# --------------------------------------------------------------------------------------------


def prepare(summary: pd.DataFrame) -> pd.DataFrame:
    """A copy of the summary with the NUMERIC columns numeric, ``accumulation_steps`` filled,
    ``effective_batch_size`` (``batch_size`` × ``accumulation_steps``, the samples of one update;
    computed for every row, those without a result too) and ``reached`` (the run reached its
    target) and ``short`` (one of train.predict's short runs, which stop before it by design)."""
    frame = summary.copy()
    for column in NUMERIC:
        if column in frame:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    # the effective batch of every row, those without a result too (their grid keys come from
    # their path)
    frame = with_grid_defaults(frame)
    # the convergence report compares batch sizes on one device; runs on several are the
    # devices axis's (summary, scaling plot), kept out of its tables
    frame = frame[frame["devices"] == 1].copy()
    frame["effective_batch_size"] = (frame["batch_size"] * frame["accumulation_steps"]).astype(int)
    reached = frame.get("target_reached", pd.Series(False, index=frame.index))
    frame["reached"] = [_truthy(v) for v in reached]
    short = frame.get("short_run", pd.Series(False, index=frame.index))
    frame["short"] = [_truthy(v) for v in short]
    return frame


def chosen_workers(rows: pd.DataFrame) -> int:
    """The DataLoader worker count a model's report uses: the one with the most training runs,
    the smallest of those on a tie. (Workers change the seconds, not what is learnt: the same
    seed trains on the same batches in the same order whatever the worker count.)"""
    counts = rows.groupby("num_workers").size()
    return int(min(counts.index[counts == counts.max()]))


def batch_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per effective batch size of one model's runs (one worker count).

    Columns: ``effective_batch_size``, ``batch_size`` (its micro-batch), ``n_seeds`` (rows,
    whatever their status), ``n_reached``, ``n_not_reached`` (ran ok and did not reach),
    ``n_failed`` (any other status) and ``failures`` (``seed:status;...``), ``all_reached`` (every
    seed ran ok and reached), for steps, samples and seconds ``<q>_mean``, ``<q>_low``,
    ``<q>_high`` (over the seeds that reached; Student t 95%) and ``<q>_values``,
    ``budget_steps`` (steps of each seed that did not reach), ``lr``, ``base_lr``,
    ``lr_scaling``, ``samples_per_s`` (mean over ok seeds), and ``b_simple``, ``b_simple_low``,
    ``b_simple_high`` and ``b_simple_runs`` (``noise_scale`` of the batch size's ok runs: medians
    over the seeds with a positive estimate, and their count).
    """
    out = [
        _seed_counts(batch, group) | _to_target(group) | _settings(group)
        for batch, group in rows.groupby("effective_batch_size", sort=True)
    ]
    return pd.DataFrame(out)


def _seed_counts(batch: Any, group: pd.DataFrame) -> dict[str, Any]:
    """The effective batch size and its micro-batch, and how many of its seeds reached the
    target, ran short or failed."""
    ok = group[group["status"] == "ok"]
    reached = group[group["reached"]]
    not_reached = ok[~ok["reached"]]
    failed = group[group["status"] != "ok"].sort_values("seed")
    return {
        "effective_batch_size": int(batch),
        "batch_size": int(group["batch_size"].iloc[0]),
        "n_seeds": len(group),
        "n_reached": len(reached),
        "n_not_reached": len(not_reached),
        "n_failed": len(failed),
        "failures": ";".join(f"{int(r.seed)}:{r.status}" for r in failed.itertuples()),
        "all_reached": len(group) > 0 and bool((group["reached"] & (group.status == "ok")).all()),
    }


def _to_target(group: pd.DataFrame) -> dict[str, Any]:
    """Steps, samples and seconds to the target over the seeds that reached it (mean, 95%
    interval, each seed's value), and the steps of the ok seeds that did not reach it."""
    reached = group[group["reached"]]
    ok = group[group["status"] == "ok"]
    row: dict[str, Any] = {}
    for quantity, column in QUANTITIES.items():
        values = reached[column] if column in reached else pd.Series(dtype=float)
        # durations carry the machine's run-to-run ratio noise: their interval on log seconds
        interval = log_mean_ci if quantity == "seconds" else mean_ci
        mean, low, high = interval(values)
        row.update({f"{quantity}_mean": mean, f"{quantity}_low": low, f"{quantity}_high": high})
        row[f"{quantity}_values"] = tuple(finite(values).tolist())
    row["budget_steps"] = tuple(finite(ok[~ok["reached"]].get("steps_run", [])).tolist())
    return row


def _settings(group: pd.DataFrame) -> dict[str, Any]:
    """The learning rate, throughput and B_simple of a batch size's ok runs."""
    ok = group[group["status"] == "ok"]
    scaling = [str(s) for s in ok.get("lr_scaling", []) if not pd.isna(s)]
    speeds = finite(ok.get("samples_per_s", []))
    noise = noise_scale(ok)
    return {
        "lr": _one_value(ok.get("lr", [])),
        "base_lr": _one_value(ok.get("base_lr", [])),
        "lr_scaling": scaling[0] if scaling else None,
        "samples_per_s": float(speeds.mean()) if len(speeds) else math.nan,
        "b_simple": noise.median if noise else math.nan,
        "b_simple_low": noise.low if noise else math.nan,
        "b_simple_high": noise.high if noise else math.nan,
        "b_simple_runs": noise.n_runs if noise else 0,
    }


def _one_value(values: Iterable[Any]) -> float | None:
    data = finite(values)
    return float(np.median(data)) if len(data) else None


@dataclass(frozen=True)
class NoiseScale:
    """A model's headline B_simple: the median over runs, with the median of their bounds."""

    median: float
    low: float
    high: float
    smallest: float
    largest: float
    n_runs: int
    n_unusable: int


def noise_scale(rows: pd.DataFrame) -> NoiseScale | None:
    """B_simple over a model's ok runs (None when none measured it). Runs whose estimate is
    missing or not positive (noise swamped the signal) are counted as ``n_unusable``; the
    interval is the median of the bounds of the runs that have one (an open upper bound, stored
    empty, counts as infinite)."""
    if "noise_scale_b_simple" not in rows:
        return None
    ok = rows[rows["status"] == "ok"]
    if "noise_scale_measurements" in ok:
        ok = ok[pd.to_numeric(ok["noise_scale_measurements"], errors="coerce") > 0]
    values = pd.to_numeric(ok["noise_scale_b_simple"], errors="coerce")
    usable = ok[np.isfinite(values) & (values > 0)]
    if usable.empty:
        return None
    b = usable["noise_scale_b_simple"].astype(float)
    low = pd.to_numeric(usable.get("noise_scale_ci95_low", np.nan), errors="coerce")
    high = pd.to_numeric(usable.get("noise_scale_ci95_high", np.nan), errors="coerce")
    bounded = low.notna()
    return NoiseScale(
        median=float(b.median()),
        low=float(low[bounded].median()) if bounded.any() else math.nan,
        high=float(high[bounded].fillna(np.inf).median()) if bounded.any() else math.nan,
        smallest=float(b.min()),
        largest=float(b.max()),
        n_runs=len(usable),
        n_unusable=len(ok) - len(usable),
    )


def target_of(rows: pd.DataFrame) -> tuple[str | None, float | None]:
    """The runs' target: (metric, value), (None, None) when they had none."""
    metrics = [str(m) for m in rows.get("target_metric", []) if not pd.isna(m)]
    targets = finite(rows.get("target", []))
    if not metrics or not len(targets):
        return None, None
    return metrics[0], float(targets[0])


# --------------------------------------------------------------------------------------------
# A model's analysis
# --------------------------------------------------------------------------------------------


@dataclass
class ModelReport:
    """Everything the figures and the document say about one model."""

    model: str
    dataset: str
    workers: int
    other_workers: tuple[int, ...]
    metric: str | None
    target: float | None
    table: pd.DataFrame
    knee: Knee | None
    knee_note: str
    noise: NoiseScale | None
    best: dict[str, Any] | None
    recommendation: str
    eval_every: float | None = None
    accumulation: int = 1  # micro-batches per update of every run in this report
    #: train.predict: this model's rows of prediction.csv
    #: (batchscope.report.convergence.prediction_table)
    prediction: pd.DataFrame | None = None

    @property
    def title(self) -> str:
        title = f"{self.model} ({self.dataset}), {self.workers} DataLoader worker(s)"
        if self.accumulation != 1:
            title += f", {self.accumulation} accumulation steps"
        return title

    @property
    def target_text(self) -> str:
        if self.metric is None:
            return "no target"
        sign = "≤" if "loss" in self.metric else "≥"
        return f"{self.metric} {sign} {self.target:g}"


def candidates(table: pd.DataFrame) -> pd.DataFrame:
    """The batch sizes a recommendation may pick: every seed ran ok and reached the target."""
    return table[table["all_reached"] & table["seconds_mean"].notna()]


def highest_throughput(table: pd.DataFrame) -> dict[str, Any] | None:
    """The table row of the batch size with the most samples/s (None when none ran ok)."""
    fastest = table[table["samples_per_s"].notna()]
    if fastest.empty:
        return None
    return fastest.sort_values("samples_per_s").iloc[-1].to_dict()


def regime_groups(report: ModelReport) -> dict[str, list[int]]:
    """The batch sizes in each regime of the fitted curve, by regime (every REGIMES key)."""
    regimes = report.table.dropna(subset=["regime"])
    return {
        name: [int(b) for b in regimes.loc[regimes["regime"] == name, "effective_batch_size"]]
        for name in REGIMES
    }


# --------------------------------------------------------------------------------------------
# Its runs' curves
# --------------------------------------------------------------------------------------------


def run_curves(curves: pd.DataFrame, summary: pd.DataFrame, report: ModelReport) -> pd.DataFrame:
    """Steps rows of the report's ok training runs, with their effective batch size."""
    if curves.empty:
        return curves
    frame = prepare(summary)
    runs = frame[
        (frame["mode"] == "train")
        & (frame["model"] == report.model)
        & (frame["dataset"] == report.dataset)
        & (frame["num_workers"] == report.workers)
        & (frame["accumulation_steps"] == report.accumulation)
        & (frame["status"] == "ok")
    ]
    keys = ["mode", "model", "dataset", "batch_size", "accumulation_steps", "num_workers"]
    keys += ["devices", "seed"]
    curves = with_grid_defaults(curves)
    columns = [*keys, "effective_batch_size", "noise_scale_batch_small", "noise_scale_batch_big"]
    runs = runs.reindex(columns=columns)
    rows = curves.merge(runs, on=keys, how="inner")
    for column in ("step", "samples_seen", "elapsed_s", "loss", "val_loss"):
        if column in rows:
            rows[column] = pd.to_numeric(rows[column], errors="coerce")
    return rows


def eval_spacing(rows: pd.DataFrame) -> float | None:
    """The median number of samples between consecutive evaluations of the same run."""
    if rows.empty or "val_loss" not in rows and "val_accuracy" not in rows:
        return None
    metric = "val_accuracy" if "val_accuracy" in rows else "val_loss"
    evals = rows[pd.to_numeric(rows[metric], errors="coerce").notna()]
    gaps = evals.groupby(["effective_batch_size", "seed"])["samples_seen"].diff().dropna()
    return float(gaps.median()) if len(gaps) else None
