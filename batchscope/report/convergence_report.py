"""Convergence report: how many steps, samples and seconds each batch size needs to reach the
training target, across seeds, and where the critical batch size lies.

From the sweep's ``summary.csv`` and ``curves.csv`` (``batchscope.report.aggregate``), per
model (training runs only, one DataLoader worker count: see ``chosen_workers``), this writes

- ``convergence_steps.png``: steps to the target vs effective batch size on log-log axes (Shallue
  et al. 2018): the mean over the seeds that reached it with its 95% Student-t interval, each
  seed, seeds that did not reach it (drawn at the steps they ran, a lower bound, and counted),
  the perfect-scaling line steps ∝ 1/B through the smallest batch, the fitted curve
  S = S_min (1 + B_noise/B) (McCandlish et al. 2018) with its regimes shaded, and vertical
  markers for the measured gradient noise scale B_simple (with its interval) and the knee B_noise;
- ``convergence_loss_samples.png`` and ``convergence_loss_time.png``: training loss (and the
  validation loss at each evaluation) vs samples seen and vs seconds on the clock, one line per
  batch size, mean over seeds;
- ``convergence_noise_scale.png``: B_simple over training, per batch size, with its interval;
- ``convergence.md`` and ``convergence.html``: the per-batch-size table, B_simple, the knee and
  the regimes, the recommendation (the batch size with the lowest time to target) and how to
  read it all;
- ``convergence.json``: the same findings, machine-readable (``write_findings``), for
  ``batchscope.report.recommend --convergence``.

The knee
--------
McCandlish et al.'s trade-off S = S_min + E_min/B = S_min (1 + B_noise/B) is fitted here by least
squares in log steps, min over (S_min, B_noise) of Σ (log S_i − log S_min − log(1 + B_noise/B_i))²:
the distance seen on the log-log plot. For a fixed B_noise the best log S_min is the mean of
log S_i − log(1 + B_noise/B_i), so the fit is a one-dimensional search over B_noise (a geometric
grid, refined by golden-section search). A best B_noise at the grid's top means the steps still
fall as 1/B at the largest batch (the knee lies beyond it); at its bottom, larger batches never
helped. Only batch sizes whose seeds all reached the target enter the fit: the mean over the
seeds that reached it is biased low where some did not. Its interval is a percentile bootstrap
over seeds (each batch size's seeds resampled with replacement); with three seeds it shows the
seed-to-seed noise roughly, and understates it.

Regimes, by the fitted curve's log-log slope −B_noise/(B + B_noise): perfect scaling while
B ≤ B_noise/4 (doubling B still nearly halves the steps), no benefit from B ≥ 4·B_noise, diminishing
returns between (``REGIME_FACTOR``).

B_simple = tr(Σ)/|G|² is measured by each training run (``train.noise_scale_every_steps``); the
summary holds each run's estimate at the end of training with a 95% interval. The headline value
of a model is the median over its runs (every batch size and seed), its interval the median of
the runs' lower and upper bounds. Over training, measurements are binned by samples seen and
pooled over seeds: B_simple of a bin is Σ tr(Σ)/Σ |G|² of its measurements (the ratio of means,
McCandlish et al. appendix A.1), its interval a bootstrap over the measurements.

Recommendation: among batch sizes whose every seed ran ok and reached the target, the one with the
lowest mean seconds to the target (time on the clock, evaluations excluded), with the learning
rate it used, and whether it is below, around (within a factor of two) or above B_simple and the
knee.

Command line::

    python -m batchscope.report.convergence_report --summary results/summary.csv \\
        --curves results/curves.csv --outdir results/convergence

This module needs pandas, NumPy, matplotlib and seaborn, never torch.
"""

from __future__ import annotations

import argparse
import html
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: figures are files, never windows

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from batchscope.core import results  # noqa: E402
from batchscope.core.stats import mean_ci  # noqa: E402
from batchscope.report import figures  # noqa: E402
from batchscope.report.aggregate import with_accumulation  # noqa: E402
from batchscope.report.documents import html_page, html_table, markdown_table  # noqa: E402
from batchscope.report.figures import batch_axis, save_png, subplots  # noqa: E402

CONFIDENCE = 0.95

#: Regime thresholds on the fitted curve's log-log slope −B_noise/(B + B_noise): perfect scaling
#: while B ≤ B_noise/4 (slope ≤ −0.8), no benefit from B ≥ 4·B_noise (slope ≥ −0.2).
REGIME_FACTOR = 4.0
REGIMES = ("perfect scaling", "diminishing returns", "no benefit")
REGIME_COLORS = {
    "perfect scaling": "tab:green",
    "diminishing returns": "gold",
    "no benefit": "tab:red",
}

#: A batch size within this factor of a reference (B_simple, the knee) is "around" it.
AROUND_FACTOR = 2.0

#: The knee search: B_noise from the smallest batch / GRID_SPAN to the largest × GRID_SPAN.
GRID_SPAN = 1000.0
GRID_POINTS = 481
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0

#: Bins of samples seen for B_simple over training.
NOISE_BINS = 8

#: Training-loss lines are smoothed by a trailing moving average over this share of their steps.
SMOOTH_FRACTION = 0.04

#: File names the command line writes into ``--outdir``.
STEPS_PNG = "convergence_steps.png"
LOSS_SAMPLES_PNG = "convergence_loss_samples.png"
LOSS_TIME_PNG = "convergence_loss_time.png"
NOISE_PNG = "convergence_noise_scale.png"
MARKDOWN = "convergence.md"
HTML = "convergence.html"
FINDINGS = "convergence.json"

#: Bumped whenever a key of ``convergence.json`` changes meaning.
FINDINGS_VERSION = 1

#: Artist labels (gid) the steps figure gives what it draws, so tests and readers can find them.
GID_MEAN = "mean_steps"
GID_SEED = "seed_steps"
GID_NOT_REACHED = "not_reached"
GID_NOT_REACHED_COUNT = "not_reached_count"
GID_PERFECT = "perfect_scaling"
GID_FIT = "knee_fit"
GID_KNEE = "knee"
GID_B_SIMPLE = "b_simple"
GID_B_SIMPLE_BAND = "b_simple_interval"
GID_KNEE_BAND = "knee_interval"
GID_REGIME = "regime"

NO_TARGET = "no training runs with a target in this sweep"
NO_NOISE = "no gradient noise scale measurements in this sweep (train.noise_scale_every_steps)"

QUANTITIES = {"steps": "steps_to_target", "samples": "samples_to_target"}
QUANTITIES["seconds"] = "seconds_to_target"

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


# --------------------------------------------------------------------------------------------
# Small statistics
# --------------------------------------------------------------------------------------------


def _finite(values: Iterable[Any]) -> np.ndarray:
    array = pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce").to_numpy(float)
    return array[np.isfinite(array)]


def _truthy(value: Any) -> bool:
    """A CSV cell as a boolean: True/true/1 (pandas may read the column as text or numbers)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    return str(value).strip().lower() in ("true", "1", "1.0")


def relation(batch_size: float, reference: float | None, factor: float = AROUND_FACTOR) -> str:
    """``below``, ``around`` (within ``factor`` either way) or ``above`` ``reference``."""
    if reference is None or not math.isfinite(reference) or reference <= 0:
        raise ValueError(f"relation needs a positive reference, got {reference!r}")
    if batch_size * factor < reference:
        return "below"
    if batch_size > reference * factor:
        return "above"
    return "around"


def regime(batch_size: float, b_noise: float) -> str:
    """The regime of ``batch_size`` on the curve S = S_min (1 + B_noise/B) (see the module)."""
    if batch_size * REGIME_FACTOR <= b_noise:
        return REGIMES[0]
    if batch_size >= REGIME_FACTOR * b_noise:
        return REGIMES[2]
    return REGIMES[1]


# --------------------------------------------------------------------------------------------
# The knee: S = S_min (1 + B_noise/B), least squares in log steps
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Knee:
    """The fitted curve and its knee.

    ``b_noise`` is the knee (None when ``edge`` says the best fit lies at the search's edge:
    ``above``, steps still ∝ 1/B at the largest batch; ``below``, larger batches never helped),
    ``s_min`` the fewest steps (B → ∞), ``interval`` the bootstrap 95% interval of ``b_noise``
    (an end may be 0 or inf when resamples hit the edges; None without resamples),
    ``rms_log_residual`` the fit's error in natural-log steps, ``points`` the (B, mean steps)
    it was fitted to.
    """

    b_noise: float | None
    s_min: float
    edge: str | None
    interval: tuple[float, float] | None
    rms_log_residual: float
    points: tuple[tuple[float, float], ...]

    def steps(self, batch_size: np.ndarray | float) -> np.ndarray | float:
        """The fitted steps at ``batch_size`` (1/B scaling when the knee is above the range)."""
        b = np.asarray(batch_size, dtype=float)
        if self.edge == "above":
            return self.s_min * self._b_top / b
        if self.edge == "below":
            return self.s_min + 0.0 * b
        return self.s_min * (1.0 + self.b_noise / b)

    @property
    def _b_top(self) -> float:
        return max(b for b, _ in self.points)


def _grid(batch: np.ndarray) -> np.ndarray:
    return np.geomspace(batch.min() / GRID_SPAN, batch.max() * GRID_SPAN, GRID_POINTS)


def _ssr(log_steps: np.ndarray, batch: np.ndarray, b_noise: np.ndarray) -> np.ndarray:
    """Sum of squared log residuals at each B_noise (last axis of ``log_steps`` = batch sizes).

    ``log_steps`` has shape (..., K), ``b_noise`` (G,); the result (..., G)."""
    shape = np.log1p(b_noise[:, None] / batch[None, :])  # (G, K)
    resid = log_steps[..., None, :] - shape  # (..., G, K)
    resid = resid - resid.mean(axis=-1, keepdims=True)  # the best log S_min for each B_noise
    return (resid**2).sum(axis=-1)


def fit_knee(batch_sizes: Sequence[float], steps: Sequence[float], *, bootstrap=None) -> Knee:
    """Fit S = S_min (1 + B_noise/B) to (batch size, steps) points (see the module docstring).

    ``bootstrap``, if given, is a sequence of resampled step arrays (each aligned with
    ``batch_sizes``) whose fits give ``interval``.
    """
    batch = np.asarray(batch_sizes, dtype=float)
    log_steps = np.log(np.asarray(steps, dtype=float))
    if len(np.unique(batch)) < 2:
        raise ValueError("the knee fit needs points at two or more batch sizes")
    if not (np.all(batch > 0) and np.all(np.isfinite(log_steps))):
        raise ValueError("batch sizes and steps must be positive and finite")
    grid = _grid(batch)
    ssr = _ssr(log_steps, batch, grid)
    best = int(np.argmin(ssr))
    edge = "below" if best == 0 else "above" if best == len(grid) - 1 else None
    if edge is None:  # golden-section refinement between the best point's neighbours
        b_noise = _refine(log_steps, batch, math.log(grid[best - 1]), math.log(grid[best + 1]))
        shape = np.log1p(b_noise / batch)
        s_min = math.exp(float((log_steps - shape).mean()))
        resid = log_steps - math.log(s_min) - shape
    elif edge == "above":  # S = c/B: the knee is beyond the largest batch
        b_noise = None
        b_top = batch.max()
        log_c = float((log_steps + np.log(batch / b_top)).mean())
        s_min = math.exp(log_c)  # steps at the largest batch, on the 1/B line
        resid = log_steps - log_c + np.log(batch / b_top)
    else:  # S = S_min: no batch size helped
        b_noise = None
        s_min = math.exp(float(log_steps.mean()))
        resid = log_steps - math.log(s_min)
    interval = None
    if bootstrap is not None and len(bootstrap):
        samples = np.log(np.asarray(bootstrap, dtype=float))
        picks = np.argmin(_ssr(samples, batch, grid), axis=-1)
        values = np.where(picks == 0, 0.0, np.where(picks == len(grid) - 1, np.inf, grid[picks]))
        tail = (1 - CONFIDENCE) / 2
        interval = (
            float(np.quantile(values, tail, method="lower")),
            float(np.quantile(values, 1 - tail, method="higher")),
        )
    order = np.argsort(batch)
    return Knee(
        b_noise=b_noise,
        s_min=s_min,
        edge=edge,
        interval=interval,
        rms_log_residual=float(np.sqrt(np.mean(resid**2))),
        points=tuple(zip(batch[order].tolist(), np.exp(log_steps[order]).tolist(), strict=True)),
    )


def _refine(log_steps: np.ndarray, batch: np.ndarray, lo: float, hi: float) -> float:
    """Golden-section search for the best B_noise on [e^lo, e^hi] (in log B_noise)."""
    ratio = (math.sqrt(5) - 1) / 2

    def cost(log_b: float) -> float:
        return float(_ssr(log_steps, batch, np.array([math.exp(log_b)]))[0])

    a, b = lo, hi
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = cost(c), cost(d)
    for _ in range(60):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = cost(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = cost(d)
    return math.exp((a + b) / 2)


def _bootstrap_means(values: Sequence[np.ndarray], resamples: int, seed: int) -> np.ndarray:
    """(resamples, K) means of each batch size's values resampled with replacement."""
    rng = np.random.default_rng(seed)
    columns = [v[rng.integers(0, len(v), size=(resamples, len(v)))].mean(axis=1) for v in values]
    return np.column_stack(columns)


# --------------------------------------------------------------------------------------------
# The runs of a model, and its per-batch-size table
# --------------------------------------------------------------------------------------------


def _prepare(summary: pd.DataFrame) -> pd.DataFrame:
    frame = summary.copy()
    for column in NUMERIC:
        if column in frame:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    # the effective batch of every row, those without a result too (their grid keys come from
    # their path)
    frame = with_accumulation(frame)
    frame["batch"] = (frame["batch_size"] * frame["accumulation_steps"]).astype(int)
    reached = frame.get("target_reached", pd.Series(False, index=frame.index))
    frame["reached"] = [_truthy(v) for v in reached]
    return frame


def chosen_workers(rows: pd.DataFrame) -> int:
    """The DataLoader worker count a model's report uses: the one with the most training runs,
    the smallest of those on a tie. (Workers change the seconds, not what is learnt: the same
    seed trains on the same batches in the same order whatever the worker count.)"""
    counts = rows.groupby("num_workers").size()
    return int(min(counts.index[counts == counts.max()]))


def batch_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per effective batch size of one model's runs (one worker count).

    Columns: ``batch`` (effective batch size), ``micro_batch``, ``n_seeds`` (rows, whatever their
    status), ``n_reached``, ``n_not_reached`` (ran ok and did not reach), ``n_failed`` (any other
    status) and ``failures`` (``seed:status;...``), ``all_reached`` (every seed ran ok and reached),
    for steps, samples and seconds ``<q>_mean``, ``<q>_low``, ``<q>_high`` (over the seeds that
    reached; Student t 95%) and ``<q>_values``, ``budget_steps`` (steps of each seed that did not
    reach), ``lr``, ``base_lr``, ``lr_scaling``, ``samples_per_s`` (mean over ok seeds), and
    ``b_simple``, ``b_simple_low``, ``b_simple_high`` and ``b_simple_runs`` (``noise_scale`` of
    the batch size's ok runs: medians over the seeds with a positive estimate, and their count).
    """
    out = []
    for batch, group in rows.groupby("batch", sort=True):
        ok = group[group["status"] == "ok"]
        reached = group[group["reached"]]
        not_reached = ok[~ok["reached"]]
        failed = group[group["status"] != "ok"].sort_values("seed")
        row: dict[str, Any] = {
            "batch": int(batch),
            "micro_batch": int(group["batch_size"].iloc[0]),
            "n_seeds": len(group),
            "n_reached": len(reached),
            "n_not_reached": len(not_reached),
            "n_failed": len(failed),
            "failures": ";".join(f"{int(r.seed)}:{r.status}" for r in failed.itertuples()),
            "all_reached": len(group) > 0
            and bool((group["reached"] & (group.status == "ok")).all()),
        }
        for quantity, column in QUANTITIES.items():
            values = reached[column] if column in reached else pd.Series(dtype=float)
            mean, low, high = mean_ci(values)
            row.update({f"{quantity}_mean": mean, f"{quantity}_low": low, f"{quantity}_high": high})
            row[f"{quantity}_values"] = tuple(_finite(values).tolist())
        row["budget_steps"] = tuple(_finite(not_reached.get("steps_run", [])).tolist())
        row["lr"] = _one_value(ok.get("lr", []))
        row["base_lr"] = _one_value(ok.get("base_lr", []))
        scaling = [str(s) for s in ok.get("lr_scaling", []) if not pd.isna(s)]
        row["lr_scaling"] = scaling[0] if scaling else None
        speeds = _finite(ok.get("samples_per_s", []))
        row["samples_per_s"] = float(speeds.mean()) if len(speeds) else math.nan
        noise = noise_scale(ok)
        row["b_simple"] = noise.median if noise else math.nan
        row["b_simple_low"] = noise.low if noise else math.nan
        row["b_simple_high"] = noise.high if noise else math.nan
        row["b_simple_runs"] = noise.n_runs if noise else 0
        out.append(row)
    return pd.DataFrame(out)


def _one_value(values: Iterable[Any]) -> float | None:
    data = _finite(values)
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


def _target(rows: pd.DataFrame) -> tuple[str | None, float | None]:
    metrics = [str(m) for m in rows.get("target_metric", []) if not pd.isna(m)]
    targets = _finite(rows.get("target", []))
    if not metrics or not len(targets):
        return None, None
    return metrics[0], float(targets[0])


def _fit(table: pd.DataFrame) -> tuple[Knee | None, str]:
    points = table[table["all_reached"] & table["steps_mean"].notna()]
    skipped = table[~table["all_reached"] & (table["n_reached"] > 0)]["batch"].tolist()
    if len(points) < 2:
        return None, (
            "Too few batch sizes reached the target in every seed to fit the knee "
            f"({len(points)}; at least 2 needed)."
        )
    values = [np.asarray(v, dtype=float) for v in points["steps_values"]]
    # with one seed per batch size there is nothing to resample: no interval
    boot = None
    if any(len(v) > 1 for v in values):
        boot = _bootstrap_means(values, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED)
    knee = fit_knee(points["batch"].tolist(), points["steps_mean"].tolist(), bootstrap=boot)
    note = f"Fitted to {len(points)} batch sizes whose seeds all reached the target"
    if skipped:
        note += f"; left out (not every seed reached it): {_sizes(skipped)}"
    return knee, note + "."


def _sizes(sizes: Iterable[Any]) -> str:
    return ", ".join(str(int(s)) for s in sizes)


def analyse(summary: pd.DataFrame, curves: pd.DataFrame | None = None) -> list[ModelReport]:
    """One report per model x dataset x accumulation steps with training runs, sorted by those
    (runs of one effective batch made of different micro-batches are not pooled). With
    ``curves``, each report also knows how often its runs evaluated (``eval_every``)."""
    if summary.empty or "mode" not in summary:
        return []
    frame = _prepare(summary)
    train = frame[frame["mode"] == "train"]
    reports = []
    keys = ["model", "dataset", "accumulation_steps"]
    for (model, dataset, accumulation), rows in train.groupby(keys, sort=True):
        workers = chosen_workers(rows)
        others = tuple(sorted(int(w) for w in set(rows["num_workers"]) - {workers}))
        rows = rows[rows["num_workers"] == workers]
        metric, target = _target(rows)
        table = batch_table(rows)
        knee, knee_note = _fit(table) if metric is not None else (None, "No target configured.")
        ran = table["n_failed"] < table["n_seeds"]  # a batch size no seed ran has no regime
        table["regime"] = [
            _regime_of(b, knee) if knee is not None and r else None
            for b, r in zip(table["batch"], ran, strict=True)
        ]
        table["slope_to_next"] = _local_slopes(table)
        report = ModelReport(
            model=str(model),
            dataset=str(dataset),
            workers=workers,
            other_workers=others,
            metric=metric,
            target=target,
            table=table,
            knee=knee,
            knee_note=knee_note,
            noise=noise_scale(rows),
            best=None,
            recommendation="",
            accumulation=int(accumulation),
        )
        report.best, report.recommendation = recommend(report)
        if curves is not None:
            report.eval_every = eval_spacing(_run_curves(curves, summary, report))
        reports.append(report)
    return reports


def eval_spacing(rows: pd.DataFrame) -> float | None:
    """The median number of samples between consecutive evaluations of the same run."""
    if rows.empty or "val_loss" not in rows and "val_accuracy" not in rows:
        return None
    metric = "val_accuracy" if "val_accuracy" in rows else "val_loss"
    evals = rows[pd.to_numeric(rows[metric], errors="coerce").notna()]
    gaps = evals.groupby(["batch", "seed"])["samples_seen"].diff().dropna()
    return float(gaps.median()) if len(gaps) else None


def _regime_of(batch: float, knee: Knee) -> str:
    if knee.edge == "above":
        return REGIMES[0]
    if knee.edge == "below":
        return REGIMES[2]
    return regime(batch, knee.b_noise)


def _local_slopes(table: pd.DataFrame) -> list[float]:
    """Measured log-log slope of mean steps from each batch size to the next larger one (model
    free: −1 is perfect scaling, 0 no benefit)."""
    slopes = []
    rows = list(table.itertuples(index=False))
    for here, there in zip(rows, [*rows[1:], None], strict=True):
        if there is None or not (here.steps_mean > 0 and there.steps_mean > 0):
            slopes.append(math.nan)
            continue
        slopes.append(
            math.log(there.steps_mean / here.steps_mean) / math.log(there.batch / here.batch)
        )
    return slopes


def recommend(report: ModelReport) -> tuple[dict[str, Any] | None, str]:
    """(the recommended batch size's table row, the recommendation in words)."""
    table = report.table
    if report.metric is None:
        return None, "No training target was configured (train.target_accuracy or target_loss)."
    candidates = _candidates(table)
    if candidates.empty:
        if table["n_reached"].sum() == 0:
            return None, (
                f"No run of {report.model} reached the target ({report.target_text}) within its "
                "training budget, so there is no time to target to recommend a batch size by. "
                "Train longer (train.epochs, train.max_steps) or set a lower target."
            )
        partly = table[table["n_reached"] > 0]
        return None, (
            f"No batch size of {report.model} reached the target ({report.target_text}) in every "
            f"seed, so none is recommended. Some seeds reached it at batch size(s) "
            f"{_sizes(partly['batch'])}: train longer or set a lower target to compare them."
        )
    best = candidates.sort_values(["seconds_mean", "batch"]).iloc[0].to_dict()
    text = (
        f"Train {report.model} with batch size {best['batch']}"
        + (
            f" ({best['micro_batch']} × {best['batch'] // best['micro_batch']} accumulated)"
            if best["micro_batch"] != best["batch"]
            else ""
        )
        + f" at learning rate {_lr_text(best)}: it reached {report.target_text} in "
        f"{_ci_text(best, 'seconds', '{:.1f}', ' s')} on the clock, the lowest mean time to target "
        f"of the batch sizes that reached it in every seed ({_sizes(candidates['batch'])})."
    )
    rest = candidates[candidates["batch"] != best["batch"]].sort_values("seconds_mean")
    if len(rest):
        second = rest.iloc[0]
        overlap = _overlap(best, second, "seconds")
        text += f" The next, batch size {second['batch']}, took {second['seconds_mean']:.1f} s" + (
            " (the intervals overlap: within the seeds' noise)."
            if overlap
            else " (the intervals do not overlap)."
            if overlap is not None
            else "."
        )
    top = highest_throughput(table)
    if top is not None and top["batch"] != best["batch"]:
        if top["all_reached"]:
            outcome = f"takes {top['seconds_mean']:.1f} s to the target"
        else:
            outcome = f"reached the target in {top['n_reached']} of {top['n_seeds']} seeds"
        text += (
            f" The highest throughput is at batch size {top['batch']} "
            f"({top['samples_per_s']:.0f} samples/s), which {outcome}: throughput alone "
            "would have chosen it."
        )
    text += " " + _position(best["batch"], report)
    return best, text


def _candidates(table: pd.DataFrame) -> pd.DataFrame:
    """The batch sizes a recommendation may pick: every seed ran ok and reached the target."""
    return table[table["all_reached"] & table["seconds_mean"].notna()]


def highest_throughput(table: pd.DataFrame) -> dict[str, Any] | None:
    """The table row of the batch size with the most samples/s (None when none ran ok)."""
    fastest = table[table["samples_per_s"].notna()]
    if fastest.empty:
        return None
    return fastest.sort_values("samples_per_s").iloc[-1].to_dict()


def position(batch: int, report: ModelReport) -> dict[str, str | None]:
    """Where ``batch`` sits: ``b_simple`` and ``knee`` are ``below``, ``around`` (within
    AROUND_FACTOR) or ``above`` them (None when unmeasured or not fitted; a knee at the search's
    edge counts as beyond the measured range), ``regime`` its regime on the fitted curve."""
    noise, knee = report.noise, report.knee
    if knee is None:
        to_knee = None
    elif knee.b_noise is not None:
        to_knee = relation(batch, knee.b_noise)
    else:  # beyond the largest batch (edge above), or below the smallest (edge below)
        to_knee = "below" if knee.edge == "above" else "above"
    row = report.table[report.table["batch"] == batch]
    return {
        "b_simple": relation(batch, noise.median) if noise is not None else None,
        "knee": to_knee,
        "regime": row["regime"].iloc[0] if len(row) and row["regime"].iloc[0] else None,
    }


def _position(batch: int, report: ModelReport) -> str:
    where = position(batch, report)
    parts = []
    if report.noise is not None:
        parts.append(
            f"{where['b_simple']} the gradient noise scale B_simple ≈ {_num(report.noise.median)}"
        )
    else:
        parts.append("B_simple was not measured (train.noise_scale_every_steps)")
    knee = report.knee
    if knee is not None and knee.b_noise is not None:
        parts.append(f"{where['knee']} the knee B_noise ≈ {knee.b_noise:.0f}")
    elif knee is not None and knee.edge == "above":
        parts.append("below the knee, which lies beyond the largest batch size measured")
    elif knee is not None:
        parts.append("above the knee: no larger batch size cut the steps to the target")
    else:
        parts.append("the knee could not be fitted")
    regime_text = f", in the {where['regime']} regime" if where["regime"] else ""
    return (
        f"Batch size {batch} is "
        + " and ".join(parts)
        + f"{regime_text} (around: within a factor of two)."
    )


def _overlap(a: Mapping[str, Any], b: Mapping[str, Any], quantity: str) -> bool | None:
    lows = (a[f"{quantity}_low"], b[f"{quantity}_low"])
    highs = (a[f"{quantity}_high"], b[f"{quantity}_high"])
    if any(pd.isna(v) for v in (*lows, *highs)):
        return None
    return bool(lows[0] <= highs[1] and lows[1] <= highs[0])


def _lr_text(row: Mapping[str, Any]) -> str:
    lr = row.get("lr")
    if lr is None or pd.isna(lr):
        return "unknown"
    text = f"{lr:.4g}"
    scaling, base = row.get("lr_scaling"), row.get("base_lr")
    if scaling and scaling != "none" and base is not None and not pd.isna(base):
        text += f" ({scaling} scaling of base lr {base:.4g})"
    return text


def _ci_text(row: Mapping[str, Any], quantity: str, fmt: str, unit: str = "") -> str:
    """``mean [low, high]`` with ``unit`` after the mean (the interval is in the same unit)."""
    mean, low, high = (row[f"{quantity}_{p}"] for p in ("mean", "low", "high"))
    if pd.isna(mean):
        return "–"
    if pd.isna(low):
        return f"{fmt.format(mean)}{unit} (one seed)"
    return f"{fmt.format(mean)}{unit} [{fmt.format(low)}, {fmt.format(high)}]"


def _num(value: float) -> str:
    """A sample count for text: whole numbers from 10 up, two significant digits below."""
    if not math.isfinite(value):
        return "∞" if value > 0 else "–"
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}"


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def _subplots(count: int, width: float = 6.4, height: float = 4.8) -> tuple[Figure, list]:
    """The report's panels, two per row."""
    return subplots(count, width, height, max_cols=2)


def placeholder_figure(message: str, title: str = "") -> Figure:
    """A figure that only says ``message`` (wrapped: some of the report's are long)."""
    return figures.placeholder_figure(message, title, width=7.0, fontsize=12, wrap=True)


def _batch_axis(ax, sizes: Sequence[int], lo: float, hi: float) -> None:
    batch_axis(ax, sizes, lo, hi, "effective batch size B (samples per update)")


def _palette(sizes: Sequence[int]) -> dict[int, tuple]:
    colors = sns.color_palette("viridis", max(len(sizes), 1))
    return {int(s): colors[i] for i, s in enumerate(sorted(sizes))}


def steps_figure(reports: Sequence[ModelReport]) -> Figure:
    """Steps to the target vs effective batch size, one panel per model (see the module)."""
    reports = [r for r in reports if r.metric is not None and len(r.table)]
    title = "Steps to target vs batch size"
    if not reports:
        return placeholder_figure(NO_TARGET, title)
    fig, axes = _subplots(len(reports), width=7.5, height=7.0)
    for ax, report in zip(axes, reports, strict=True):
        _draw_steps(ax, report)
    fig.suptitle(title)
    return fig


def _draw_steps(ax, report: ModelReport) -> None:
    table = report.table
    sizes = table["batch"].tolist()
    markers = [m for m in _markers(report) if m and math.isfinite(m) and m > 0]
    lo = min([*sizes, *markers]) / 1.5
    hi = max([*sizes, *markers]) * 1.5
    _batch_axis(ax, sizes, lo, hi)
    ax.set_yscale("log")
    ax.set_ylabel("optimizer steps to the target")
    ax.set_title(f"{report.title}\ntarget {report.target_text}", fontsize=10)
    xs = np.geomspace(lo, hi, 200)
    shown: list[float] = []  # every step count drawn, for the y limits

    reached = table[table["steps_mean"].notna()]
    if len(reached):
        low = (reached["steps_mean"] - reached["steps_low"]).fillna(0.0)
        high = (reached["steps_high"] - reached["steps_mean"]).fillna(0.0)
        bars = ax.errorbar(
            reached["batch"],
            reached["steps_mean"],
            yerr=[low, high],
            fmt="o-",
            color="tab:blue",
            capsize=4,
            zorder=5,
            label="mean over the seeds that reached it (95% CI)",
        )
        bars.lines[0].set_gid(GID_MEAN)
        seeds = [
            (b, v)
            for b, vs in zip(reached["batch"], reached["steps_values"], strict=True)
            for v in vs
        ]
        ax.scatter(
            *zip(*seeds, strict=True),
            s=14,
            color="tab:blue",
            alpha=0.35,
            zorder=4,
            label="one seed",
            gid=GID_SEED,
        )
        shown += [v for _, v in seeds] + reached["steps_high"].dropna().tolist()
        shown += (reached["steps_low"].dropna().clip(lower=1.0)).tolist()
        first = reached.iloc[0]
        b0, s0 = float(first["batch"]), float(first["steps_mean"])
        ax.plot(
            xs,
            s0 * b0 / xs,
            ls="--",
            color="grey",
            lw=1.2,
            gid=GID_PERFECT,
            label=f"perfect scaling: steps ∝ 1/B from B = {int(b0)}",
        )
    censored = [
        (b, v) for b, vs in zip(table["batch"], table["budget_steps"], strict=True) for v in vs
    ]
    if censored:
        ax.scatter(
            *zip(*censored, strict=True),
            marker="^",
            s=50,
            facecolors="none",
            edgecolors="tab:red",
            zorder=6,
            gid=GID_NOT_REACHED,
            label="did not reach it: drawn at its last step (a lower bound)",
        )
        shown += [v for _, v in censored]
    for row in table.itertuples(index=False):
        missed = row.n_seeds - row.n_reached
        if missed:
            ax.text(
                row.batch,
                0.02,
                f"{missed}/{row.n_seeds}\nmissed",
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=7,
                color="tab:red",
                gid=GID_NOT_REACHED_COUNT,
            )
    if not len(reached):
        ax.text(
            0.5,
            0.5,
            "no run reached the target",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=11,
            color="tab:red",
        )
    if shown:  # room below for the counts and above for the regimes and intervals
        ax.set_ylim(min(shown) / 2.2, max(shown) * 2.2)
    knee = report.knee
    if knee is not None:
        fit_label = (
            "fit S = S_min (1 + B_noise/B)"
            if knee.edge is None
            else "fit: steps ∝ 1/B (knee beyond)"
            if knee.edge == "above"
            else "fit: constant steps (no benefit)"
        )
        ax.plot(xs, knee.steps(xs), color="black", lw=1.0, gid=GID_FIT, label=fit_label)
        _shade_regimes(ax, knee, lo, hi)
        if knee.b_noise is not None:
            ax.axvline(
                knee.b_noise,
                color="black",
                ls=":",
                lw=1.5,
                gid=GID_KNEE,
                label=f"knee B_noise ≈ {knee.b_noise:.0f} (fit; bar: bootstrap 95%)",
            )
            if knee.interval is not None:
                _interval_bar(ax, knee.interval, 0.84, "black", lo, hi, GID_KNEE_BAND)
    noise = report.noise
    if noise is not None:
        ax.axvline(
            noise.median,
            color="tab:purple",
            lw=1.8,
            gid=GID_B_SIMPLE,
            label=f"B_simple ≈ {_num(noise.median)}, median of {noise.n_runs} runs "
            "(bar: median 95% interval)",
        )
        if math.isfinite(noise.low):
            _interval_bar(ax, (noise.low, noise.high), 0.9, "tab:purple", lo, hi, GID_B_SIMPLE_BAND)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)


def _interval_bar(ax, bounds, y: float, color, lo: float, hi: float, gid: str) -> None:
    """A horizontal bar from ``bounds[0]`` to ``bounds[1]`` at axes height ``y`` (an open or
    out-of-range end is drawn as an arrow at the axis edge)."""
    left, right = bounds
    shown_left, shown_right = max(left, lo), min(right, hi)
    if shown_right <= shown_left:
        return
    transform = ax.get_xaxis_transform()
    ax.plot(
        [shown_left, shown_right],
        [y, y],
        color=color,
        lw=2.5,
        solid_capstyle="butt",
        transform=transform,
        gid=gid,
    )
    for value, end, marker in ((left, shown_left, "<"), (right, shown_right, ">")):
        ax.plot(
            [end],
            [y],
            marker=marker if value != end else "|",
            color=color,
            ms=8,
            transform=transform,
        )


def _markers(report: ModelReport) -> list[float | None]:
    values: list[float | None] = []
    if report.noise is not None:
        values.append(report.noise.median)
    if report.knee is not None:
        values.append(report.knee.b_noise)
    return values


def _shade_regimes(ax, knee: Knee, lo: float, hi: float) -> None:
    if knee.edge == "above":
        spans = [(REGIMES[0], lo, hi)]
    elif knee.edge == "below":
        spans = [(REGIMES[2], lo, hi)]
    else:
        a, b = knee.b_noise / REGIME_FACTOR, knee.b_noise * REGIME_FACTOR
        spans = [(REGIMES[0], lo, a), (REGIMES[1], a, b), (REGIMES[2], b, hi)]
    for name, start, stop in spans:
        start, stop = max(start, lo), min(stop, hi)
        if stop <= start:
            continue
        ax.axvspan(
            start,
            stop,
            color=REGIME_COLORS[name],
            alpha=0.1,
            zorder=0,
            gid=GID_REGIME,
            label=f"regime: {name}",
        )


def _run_curves(curves: pd.DataFrame, summary: pd.DataFrame, report: ModelReport) -> pd.DataFrame:
    """Steps rows of the report's ok training runs, with their effective batch size."""
    if curves.empty:
        return curves
    frame = _prepare(summary)
    runs = frame[
        (frame["mode"] == "train")
        & (frame["model"] == report.model)
        & (frame["dataset"] == report.dataset)
        & (frame["num_workers"] == report.workers)
        & (frame["accumulation_steps"] == report.accumulation)
        & (frame["status"] == "ok")
    ]
    keys = ["mode", "model", "dataset", "batch_size", "accumulation_steps", "num_workers", "seed"]
    curves = with_accumulation(curves)
    columns = [*keys, "batch", "noise_scale_batch_small", "noise_scale_batch_big"]
    runs = runs.reindex(columns=columns)
    rows = curves.merge(runs, on=keys, how="inner")
    for column in ("step", "samples_seen", "elapsed_s", "loss", "val_loss"):
        if column in rows:
            rows[column] = pd.to_numeric(rows[column], errors="coerce")
    return rows


def _mean_curve(rows: pd.DataFrame, column: str) -> pd.DataFrame:
    per_step = rows.groupby("step", sort=True)[["samples_seen", "elapsed_s", column]].mean()
    return per_step.dropna(subset=[column])


def loss_figure(
    reports: Sequence[ModelReport], summary: pd.DataFrame, curves: pd.DataFrame, x: str
) -> Figure:
    """Training loss (lines, smoothed) and validation loss (points) vs ``x`` (``samples_seen``
    or ``elapsed_s``), one line per batch size (mean over ok seeds), one panel per model."""
    label = {"samples_seen": "samples seen", "elapsed_s": "seconds on the clock (s)"}[x]
    title = f"Loss vs {label.split(' (')[0]}"
    panels = [(r, _run_curves(curves, summary, r)) for r in reports]
    panels = [(r, rows) for r, rows in panels if len(rows)]
    if not panels:
        return placeholder_figure("no training curves in this sweep", title)
    fig, axes = _subplots(len(panels))
    for ax, (report, rows) in zip(axes, panels, strict=True):
        palette = _palette(sorted(set(rows["batch"])))
        for batch, group in rows.groupby("batch", sort=True):
            color = palette[int(batch)]
            train = _mean_curve(group, "loss")
            window = max(1, round(len(train) * SMOOTH_FRACTION))
            smooth = train["loss"].rolling(window, min_periods=1).mean()
            ax.plot(train[x], smooth, color=color, lw=1.2, label=f"B = {int(batch)}")
            if "val_loss" in group:
                val = _mean_curve(group, "val_loss")
                ax.plot(val[x], val["val_loss"], "o", color=color, ms=4, mec="white", mew=0.5)
        if report.metric == "val_loss" and report.target is not None:
            ax.axhline(report.target, color="black", ls=":", lw=1, label="target")
        ax.set_xlabel(f"{label}, log scale")
        ax.set_xscale("log")
        ax.set_ylabel("loss (line: training, smoothed; points: validation)")
        ax.set_yscale("log")
        ax.set_title(report.title, fontsize=10)
        ax.legend(title="batch size", fontsize=7, title_fontsize=7)
    fig.suptitle(title)
    return fig


def noise_history(rows: pd.DataFrame, bins: int = NOISE_BINS) -> pd.DataFrame:
    """B_simple over training for one batch size's runs: measurements binned by samples seen.

    Each measurement (squared norms of the mean gradient over B_small and B_big samples) gives
    unbiased |G|² = (B_big|G_big|² − B_small|G_small|²)/(B_big − B_small) and
    tr Σ = (|G_small|² − |G_big|²)/(1/B_small − 1/B_big) (McCandlish et al., A.1); a bin's
    B_simple is Σ tr Σ / Σ |G|² over its measurements (all seeds), its 95% interval a percentile
    bootstrap over them. Columns: ``samples_seen`` (the bin's middle), ``b_simple``, ``low``,
    ``high``, ``n``.
    """
    need = ["noise_sq_small", "noise_sq_big", "noise_scale_batch_small", "noise_scale_batch_big"]
    if any(c not in rows for c in need):
        return pd.DataFrame(columns=["samples_seen", "b_simple", "low", "high", "n"])
    data = rows.copy()
    for column in need:
        data[column] = pd.to_numeric(data[column], errors="coerce")
    data = data.dropna(subset=need)
    data = data[data["noise_scale_batch_big"] > data["noise_scale_batch_small"]]
    if data.empty:
        return pd.DataFrame(columns=["samples_seen", "b_simple", "low", "high", "n"])
    small, big = data["noise_scale_batch_small"], data["noise_scale_batch_big"]
    sq_small, sq_big = data["noise_sq_small"], data["noise_sq_big"]
    g2 = ((big * sq_big - small * sq_small) / (big - small)).to_numpy(float)
    trace = ((sq_small - sq_big) / (1.0 / small - 1.0 / big)).to_numpy(float)
    seen = data["samples_seen"].to_numpy(float)
    edges = np.linspace(0.0, seen.max(), bins + 1)
    which = np.clip(np.searchsorted(edges, seen, side="left") - 1, 0, bins - 1)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    out = []
    for k in range(bins):
        pick = which == k
        n = int(pick.sum())
        if n == 0:
            continue
        g, t = g2[pick], trace[pick]
        value = t.sum() / g.sum() if g.sum() > 0 else math.inf
        low = high = math.nan
        if n >= 2:
            idx = rng.integers(0, n, size=(500, n))
            gs, ts = g[idx].sum(axis=1), t[idx].sum(axis=1)
            ratios = np.where(gs > 0, ts / np.where(gs > 0, gs, 1.0), np.inf)
            low = float(np.quantile(ratios, 0.025, method="lower"))
            high = float(np.quantile(ratios, 0.975, method="higher"))
        out.append(
            {
                "samples_seen": (edges[k] + edges[k + 1]) / 2,
                "b_simple": value,
                "low": low,
                "high": high,
                "n": n,
            }
        )
    return pd.DataFrame(out)


def noise_figure(
    reports: Sequence[ModelReport], summary: pd.DataFrame, curves: pd.DataFrame
) -> Figure:
    """B_simple over training (samples seen), one line per batch size with its 95% band."""
    title = "Gradient noise scale B_simple over training"
    panels = []
    for report in reports:
        rows = _run_curves(curves, summary, report)
        if rows.empty:
            continue
        history = {int(b): noise_history(g) for b, g in rows.groupby("batch", sort=True)}
        history = {b: h for b, h in history.items() if len(h)}
        if history:
            panels.append((report, history))
    if not panels:
        return placeholder_figure(NO_NOISE, title)
    fig, axes = _subplots(len(panels))
    for ax, (report, history) in zip(axes, panels, strict=True):
        palette = _palette(list(history))
        for batch, h in history.items():
            shown = h[np.isfinite(h["b_simple"]) & (h["b_simple"] > 0)]
            ax.plot(
                shown["samples_seen"],
                shown["b_simple"],
                "o-",
                ms=3,
                color=palette[batch],
                label=f"B = {batch}",
            )
            band = shown.dropna(subset=["low", "high"])
            band = band[band["low"] > 0]
            ax.fill_between(
                band["samples_seen"],
                band["low"],
                band["high"].clip(upper=band["b_simple"].max() * 100),
                color=palette[batch],
                alpha=0.12,
            )
        if report.knee is not None and report.knee.b_noise is not None:
            ax.axhline(
                report.knee.b_noise,
                color="black",
                ls=":",
                lw=1.5,
                label=f"knee B_noise ≈ {report.knee.b_noise:.0f}",
            )
        ax.set_yscale("log")
        ax.set_xlabel("samples seen")
        ax.set_ylabel("B_simple (samples)")
        ax.set_title(report.title, fontsize=10)
        ax.legend(title="batch size", fontsize=7, title_fontsize=7)
    fig.suptitle(title)
    return fig


def all_figures(
    reports: Sequence[ModelReport], summary: pd.DataFrame, curves: pd.DataFrame
) -> dict[str, Figure]:
    """Every figure, by its PNG file name."""
    return {
        STEPS_PNG: steps_figure(reports),
        LOSS_SAMPLES_PNG: loss_figure(reports, summary, curves, "samples_seen"),
        LOSS_TIME_PNG: loss_figure(reports, summary, curves, "elapsed_s"),
        NOISE_PNG: noise_figure(reports, summary, curves),
    }


# --------------------------------------------------------------------------------------------
# The document
# --------------------------------------------------------------------------------------------

HOW_TO_READ = (
    "How to read this. Each point of the steps plot is a batch size's mean number of optimizer "
    "updates until the validation metric first met the target, over the seeds that reached it, "
    "with its 95% confidence interval; red triangles are seeds that did not reach it, drawn at "
    "the steps they ran (the true value is higher), and every batch size says how many seeds "
    "missed. On log-log axes the grey dashed line halves the steps for each doubling of the "
    "batch: while the points follow it, a bigger batch costs no extra samples (perfect "
    "scaling); where they bend away from it each doubling saves less (diminishing returns), and "
    "where they flatten, a bigger batch only costs more samples (no benefit). The knee B_noise "
    "of the fitted curve S = S_min (1 + B_noise/B) is where a run takes twice the fewest "
    "possible steps and twice the fewest possible samples; the gradient noise scale B_simple, "
    "measured during training, predicts it (McCandlish et al. 2018 find the two agree to within "
    "a small factor). Steps are not time: the recommendation ranks batch sizes by seconds to "
    "the target on this machine, which also counts how fast each batch size runs."
)

FIGURES_TEXT = (
    f"Figures: {STEPS_PNG} (steps to the target vs batch size), {LOSS_SAMPLES_PNG} and "
    f"{LOSS_TIME_PNG} (loss vs samples seen and vs seconds), {NOISE_PNG} (B_simple over "
    "training)."
)

TABLE_COLUMNS = (
    "batch size",
    "lr",
    "reached",
    "steps to target",
    "samples to target",
    "seconds to target",
    "samples/s",
    "B_simple (median over seeds)",
    "slope to next",
    "regime",
)


def evidence_table(report: ModelReport) -> pd.DataFrame:
    """The document's per-batch-size table, as text cells."""
    rows = []
    for row in report.table.to_dict("records"):
        reached = f"{row['n_reached']}/{row['n_seeds']}"
        if row["failures"]:
            reached += f" ({row['failures']})"
        b_simple = "–"
        if not pd.isna(row["b_simple"]):
            b_simple = _num(row["b_simple"])
            if not pd.isna(row["b_simple_low"]):
                b_simple += f" [{_num(row['b_simple_low'])}, {_num(row['b_simple_high'])}]"
            ran = row["n_seeds"] - row["n_failed"]
            if row["b_simple_runs"] < ran:
                b_simple += f" ({row['b_simple_runs']} of {ran} seeds)"
        batch = str(row["batch"])
        if row["micro_batch"] != row["batch"]:
            batch += f" ({row['micro_batch']} × {row['batch'] // row['micro_batch']})"
        if report.best is not None and row["batch"] == report.best["batch"]:
            batch += " ★"
        rows.append(
            [
                batch,
                "–" if pd.isna(row["lr"]) else f"{row['lr']:.4g}",
                reached,
                _ci_text(row, "steps", "{:.0f}"),
                _ci_text(row, "samples", "{:.0f}"),
                _ci_text(row, "seconds", "{:.1f}"),
                "–" if pd.isna(row["samples_per_s"]) else f"{row['samples_per_s']:.0f}",
                b_simple,
                "–" if pd.isna(row["slope_to_next"]) else f"{row['slope_to_next']:.2f}",
                row["regime"] or "–",
            ]
        )
    return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))


def regime_groups(report: ModelReport) -> dict[str, list[int]]:
    """The batch sizes in each regime of the fitted curve, by regime (every REGIMES key)."""
    regimes = report.table.dropna(subset=["regime"])
    return {
        name: [int(b) for b in regimes.loc[regimes["regime"] == name, "batch"]] for name in REGIMES
    }


def critical_batch_notes(report: ModelReport) -> list[str]:
    """B_simple, the knee, their comparison and the regimes, one sentence each."""
    notes = []
    noise = report.noise
    if noise is None:
        notes.append(
            "B_simple: not measured (set train.noise_scale_every_steps), or no run gave a "
            "positive estimate."
        )
    else:
        high = "∞" if not math.isfinite(noise.high) else _num(noise.high)
        low = "–" if not math.isfinite(noise.low) else _num(noise.low)
        text = (
            f"B_simple ≈ {_num(noise.median)} samples (median over {noise.n_runs} runs, every "
            f"batch size and seed, each at the end of its training); 95% interval [{low}, {high}] "
            f"(median of the runs' bounds); the runs ranged from {_num(noise.smallest)} to "
            f"{_num(noise.largest)}."
        )
        if noise.n_unusable:
            text += f" {noise.n_unusable} run(s) gave no positive estimate (noise swamped |G|²)."
        notes.append(text)
    knee = report.knee
    if knee is None:
        notes.append(f"Knee: not fitted. {report.knee_note}")
    else:
        if knee.b_noise is not None:
            interval = ""
            if knee.interval is not None:
                low, high = knee.interval
                interval = f", bootstrap 95% interval over seeds [{_bound(low)}, {_bound(high)}]"
            text = (
                f"Knee B_noise ≈ {knee.b_noise:.0f} samples{interval}; S_min ≈ "
                f"{knee.s_min:.0f} steps, E_min = S_min·B_noise ≈ {knee.s_min * knee.b_noise:.0f} "
                f"samples; RMS error of the fit {knee.rms_log_residual:.2f} in log steps."
            )
            largest = max(b for b, _ in knee.points)
            if knee.b_noise > largest:
                text += (
                    f" It lies beyond the largest batch size fitted ({int(largest)}): an "
                    "extrapolation."
                )
        elif knee.edge == "above":
            text = (
                "Knee: beyond the largest batch size measured: the steps still fall as 1/B "
                "there (perfect scaling throughout)."
            )
        else:
            text = "Knee: below the smallest batch size: larger batches never cut the steps."
        notes.append(f"{text} {report.knee_note}")
        groups = regime_groups(report)
        notes.append(
            "Regimes (fitted curve): "
            + "; ".join(f"{name}: {_sizes(sizes)}" for name, sizes in groups.items() if sizes)
            + "."
        )
    if noise is not None and knee is not None and knee.b_noise is not None:
        ratio = knee.b_noise / noise.median
        notes.append(
            f"The knee is {ratio:.2g} × B_simple: "
            + (
                "they agree within a factor of two."
                if 1 / AROUND_FACTOR <= ratio <= AROUND_FACTOR
                else "they differ by more than a factor of two (B_simple is each run's estimate "
                "over its last measurements and changes as the loss falls; the knee sums up the "
                "whole way to this target)."
            )
        )
    return notes


def _bound(value: float) -> str:
    if value == 0:
        return "0"
    return "∞" if not math.isfinite(value) else f"{value:.0f}"


def _intro(report: ModelReport) -> str:
    text = (
        f"Training runs of {report.model} on {report.dataset} with {report.workers} DataLoader "
        f"worker(s), target {report.target_text}."
    )
    if report.other_workers:
        text += (
            f" Runs with {_sizes(report.other_workers)} worker(s) are left out: the report uses "
            "the worker count with the most runs (the smallest on a tie), so that every batch "
            "size's seconds come from the same input pipeline."
        )
    if report.eval_every and report.metric is not None and len(report.table):
        smallest = int(report.table["batch"].min())
        text += (
            f" The runs evaluated every {report.eval_every:.0f} samples: steps to the target is "
            "the first evaluation that met it, so it overstates the true value by up to "
            f"{report.eval_every:.0f}/B steps ({report.eval_every / smallest:.0f} at B = "
            f"{smallest})."
        )
    return text


def _blocks(reports: Sequence[ModelReport]) -> list[tuple[str, Any]]:
    """The document as (kind, content) blocks that both renderers write."""
    blocks: list[tuple[str, Any]] = [("h1", "batchscope convergence report")]
    if not reports:
        blocks.append(("p", "No training runs in this sweep."))
    for report in reports:
        blocks += [("h2", report.title), ("p", _intro(report))]
        if report.metric is not None:
            blocks.append(("p", FIGURES_TEXT))
        blocks += [("h3", "Recommendation"), ("p", report.recommendation)]
        if report.metric is None:
            continue
        blocks += [
            ("h3", "Steps, samples and seconds to the target"),
            (
                "p",
                "Mean over the seeds that reached the target [95% Student-t interval]; "
                "'reached' counts seeds that reached it out of all seeds, with any that failed "
                "(seed:status); seconds are on the clock, evaluations excluded; ★ is the "
                "recommendation.",
            ),
            ("table", evidence_table(report)),
            ("h3", "Critical batch size"),
            ("ul", critical_batch_notes(report)),
        ]
    blocks.append(("p", HOW_TO_READ))
    return blocks


def render_markdown(reports: Sequence[ModelReport]) -> str:
    """The report as Markdown."""
    out = []
    for kind, content in _blocks(reports):
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + content)
        elif kind == "p":
            out.append(content)
        elif kind == "ul":
            out.append("\n".join(f"- {item}" for item in content))
        else:
            out.append(markdown_table(content))
        out.append("")
    return "\n".join(out)


def render_html(reports: Sequence[ModelReport]) -> str:
    """The report as a standalone HTML page (the same content as the Markdown)."""
    esc = html.escape
    parts = []
    for kind, content in _blocks(reports):
        if kind in ("h1", "h2", "h3"):
            parts.append(f"<{kind}>{esc(content)}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{esc(content)}</p>")
        elif kind == "ul":
            parts += ["<ul>", *[f"<li>{esc(item)}</li>" for item in content], "</ul>"]
        else:
            parts.append(html_table(content))
    return html_page("batchscope convergence report", parts)


# --------------------------------------------------------------------------------------------
# The findings, machine-readable (convergence.json)
# --------------------------------------------------------------------------------------------


def _float(value: Any) -> float | None:
    """A number for JSON: None when missing (NaN and ±inf become null in ``write_json``)."""
    return None if value is None or pd.isna(value) else float(value)


def _text(value: Any) -> str | None:
    """A text cell for JSON: None when missing or empty."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(value)


def _quantity(row: Mapping[str, Any], quantity: str) -> dict[str, Any]:
    return {
        "mean": _float(row[f"{quantity}_mean"]),
        "low": _float(row[f"{quantity}_low"]),
        "high": _float(row[f"{quantity}_high"]),
        "values": [float(v) for v in row[f"{quantity}_values"]],
    }


def _batch_findings(row: Mapping[str, Any]) -> dict[str, Any]:
    """One row of a model's table (``batch_table``), as JSON-ready values."""
    batch, micro = int(row["batch"]), int(row["micro_batch"])
    return {
        "batch_size": batch,
        "micro_batch_size": micro,
        "accumulation_steps": batch // micro,
        "n_seeds": int(row["n_seeds"]),
        "n_reached": int(row["n_reached"]),
        "n_not_reached": int(row["n_not_reached"]),
        "n_failed": int(row["n_failed"]),
        "failures": _text(row["failures"]),
        "all_reached": bool(row["all_reached"]),
        "lr": _float(row["lr"]),
        "base_lr": _float(row["base_lr"]),
        "lr_scaling": _text(row["lr_scaling"]),
        "samples_per_s": _float(row["samples_per_s"]),
        "seconds_to_target": _quantity(row, "seconds"),
        "steps_to_target": _quantity(row, "steps"),
        "samples_to_target": _quantity(row, "samples"),
        "budget_steps": [float(v) for v in row["budget_steps"]],
        "regime": _text(row["regime"]),
    }


def findings(report: ModelReport) -> dict[str, Any]:
    """What the report found for one model, as JSON-ready values (see ``write_findings``)."""
    table = report.table
    best = None
    if report.best is not None:
        where = position(report.best["batch"], report)
        best = _batch_findings(report.best) | {
            "position": where | {"text": _position(report.best["batch"], report)}
        }
    top = highest_throughput(table)
    noise = report.noise
    b_simple = None
    if noise is not None:
        b_simple = {
            "value": noise.median,
            "low": _float(noise.low),
            "high": noise.high,  # inf (an open upper bound) becomes null
            "smallest": noise.smallest,
            "largest": noise.largest,
            "n_runs": noise.n_runs,
            "n_unusable": noise.n_unusable,
        }
    knee = None
    if report.knee is not None:
        fitted = report.knee
        knee = {
            "b_noise": fitted.b_noise,
            "edge": fitted.edge,
            "interval": list(fitted.interval) if fitted.interval is not None else None,
            "s_min": fitted.s_min,
            "rms_log_residual": fitted.rms_log_residual,
            "fitted_batch_sizes": [int(b) for b, _ in fitted.points],
        }
    return {
        "mode": "train",
        "model": report.model,
        "dataset": report.dataset,
        "accumulation_steps": report.accumulation,
        "num_workers": report.workers,
        "other_workers": list(report.other_workers),
        "target": None
        if report.metric is None
        else {"metric": report.metric, "value": report.target, "text": report.target_text},
        "best": best,
        "candidates": [int(b) for b in _candidates(table)["batch"]],
        "highest_throughput": _batch_findings(top) if top is not None else None,
        "b_simple": b_simple,
        "knee": knee,
        "knee_note": report.knee_note,
        "regimes": regime_groups(report) if report.knee is not None else None,
        "never_reached": [int(b) for b in table.loc[table["n_reached"] == 0, "batch"]],
        "partly_reached": [
            int(b) for b in table.loc[(table["n_reached"] > 0) & ~table["all_reached"], "batch"]
        ],
        "batches": [_batch_findings(row) for row in table.to_dict("records")],
        "recommendation": report.recommendation,
    }


def write_findings(reports: Sequence[ModelReport], path: str | Path) -> None:
    """Write ``convergence.json``: ``{"version", "document", "groups": [...]}``, one group per
    model x dataset of the report (mode ``train``), each ``findings(report)``.

    A group: ``mode``, ``model``, ``dataset``, ``accumulation_steps`` (of every run in it),
    ``num_workers`` (the worker count the report
    uses) and ``other_workers``; ``target`` (``metric``, ``value``, ``text``; null without one);
    ``best``, the batch size with the lowest mean seconds to the target among ``candidates``
    (those every seed reached), null when none: a batch entry plus ``position`` (``b_simple`` and
    ``knee``: ``below``, ``around`` or ``above``, null when unmeasured or not fitted; ``regime``;
    ``text``, the report's sentence); ``highest_throughput`` (a batch entry); ``b_simple``
    (``value``, the median over runs, ``low``, ``high`` (null: open), ``smallest``, ``largest``,
    ``n_runs``, ``n_unusable``; null when not measured); ``knee`` (``b_noise``, null when the fit
    lies at the search's ``edge``, ``above`` or ``below``; ``interval``, bootstrap 95% [low,
    high], an end 0 or null (infinite) when resamples hit the edges; ``s_min``,
    ``rms_log_residual``, ``fitted_batch_sizes``; null when not fitted), ``knee_note``;
    ``regimes`` (regime: batch sizes); ``never_reached`` (no seed reached the target, whether
    they ran short of it or failed) and ``partly_reached`` batch sizes; ``batches`` (every
    batch entry); ``recommendation`` (the report's text).

    A batch entry: ``batch_size`` (effective), ``micro_batch_size``, ``accumulation_steps``,
    seed counts (``n_seeds``, ``n_reached``, ``n_not_reached``, ``n_failed``, ``failures``),
    ``all_reached``, ``lr`` (the effective learning rate), ``base_lr``, ``lr_scaling``,
    ``samples_per_s``, ``seconds_to_target``, ``steps_to_target`` and ``samples_to_target``
    (``mean``, 95% Student-t ``low`` and ``high``, per-seed ``values``), ``budget_steps`` and
    ``regime``.
    """
    results.write_json(
        path,
        {
            "version": FINDINGS_VERSION,
            "document": HTML,
            "groups": [findings(report) for report in reports],
        },
    )


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def write_all(summary: pd.DataFrame, curves: pd.DataFrame, outdir: str | Path) -> list[ModelReport]:
    """Analyse, and write every figure, both documents and the findings into ``outdir``."""
    outdir = Path(outdir)
    reports = analyse(summary, curves)
    for name, fig in all_figures(reports, summary, curves).items():
        save_png(fig, outdir / name)
        plt.close(fig)
    results.write_text(outdir / MARKDOWN, render_markdown(reports))
    results.write_text(outdir / HTML, render_html(reports))
    write_findings(reports, outdir / FINDINGS)
    return reports


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.report.convergence_report",
        description="Steps to target vs batch size, B_simple, the knee and a recommendation.",
    )
    parser.add_argument(
        "--summary", required=True, help="summary CSV from batchscope.report.aggregate"
    )
    parser.add_argument(
        "--curves", required=True, help="curves CSV from batchscope.report.aggregate"
    )
    parser.add_argument("--outdir", required=True, help="folder for the figures and documents")
    args = parser.parse_args(argv)
    summary = pd.read_csv(args.summary)
    curves = pd.read_csv(args.curves, low_memory=False)
    for report in write_all(summary, curves, args.outdir):
        print(f"{report.model}: {report.recommendation}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
