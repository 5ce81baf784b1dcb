"""The convergence report's figures, one panel per model.

- ``steps_figure`` (``convergence_steps.png``): steps to the target vs effective batch size on
  log-log axes (Shallue et al. 2018): the mean over the seeds that reached it with its 95%
  Student-t interval, each seed, seeds that did not reach it (drawn at the steps they ran, a lower
  bound, and counted), the perfect-scaling line steps ∝ 1/B through the smallest batch, the
  fitted curve S = S_min (1 + B_noise/B) (McCandlish et al. 2018) with its regimes shaded, and
  vertical markers for the measured gradient noise scale B_simple (with its interval) and the
  knee B_noise. What it draws carries a gid (``GID_*``) so tests and readers can find it.
- ``loss_figure`` (``convergence_loss_samples.png`` and ``convergence_loss_time.png``): training
  loss (and the validation loss at each evaluation) vs samples seen and vs seconds on the clock,
  one line per batch size, mean over seeds;
- ``noise_figure`` (``convergence_noise_scale.png``): B_simple over training, per batch size,
  with its interval.

The panel grid, the empty figure and the batch axis are ``batchscope.report.figures``'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from batchscope.core import outputs
from batchscope.report import figures
from batchscope.report.convergence.fits import REGIME_FACTOR, REGIMES, Knee, noise_history
from batchscope.report.convergence.tables import ModelReport, NoiseScale, run_curves
from batchscope.report.documents import samples_text

#: File names of the figures (``all_figures``' keys), from the table of outputs.
STEPS_PNG, LOSS_SAMPLES_PNG, LOSS_TIME_PNG, NOISE_PNG = (
    figure.file for figure in outputs.CONVERGENCE_FIGURES
)

#: The figures, as the document lists them.
FIGURES_TEXT = (
    f"Figures: {STEPS_PNG} (steps to the target vs batch size), {LOSS_SAMPLES_PNG} and "
    f"{LOSS_TIME_PNG} (loss vs samples seen and vs seconds), {NOISE_PNG} (B_simple over "
    "training)."
)

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

REGIME_COLORS = {
    "perfect scaling": "tab:green",
    "diminishing returns": "gold",
    "no benefit": "tab:red",
}

NO_TARGET = "no training runs with a target in this sweep"
NO_NOISE = "no gradient noise scale measurements in this sweep (train.noise_scale_every_steps)"

#: Training-loss lines are smoothed by a trailing moving average over this share of their steps.
SMOOTH_FRACTION = 0.04


def _subplots(count: int, width: float = 6.4, height: float = 4.8) -> tuple[Figure, list]:
    """The report's panels, two per row."""
    return figures.subplots(count, width, height, max_cols=2)


def placeholder_figure(message: str, title: str = "") -> Figure:
    """A figure that only says ``message`` (wrapped: some of the report's are long)."""
    return figures.placeholder_figure(message, title, width=7.0, fontsize=12, wrap=True)


def _palette(sizes: Sequence[int]) -> dict[int, tuple]:
    colors = sns.color_palette("viridis", max(len(sizes), 1))
    return {int(s): colors[i] for i, s in enumerate(sorted(sizes))}


# --------------------------------------------------------------------------------------------
# Steps to the target
# --------------------------------------------------------------------------------------------


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
    """One model's panel of ``steps_figure``."""
    table = report.table
    sizes = table["effective_batch_size"].tolist()
    markers = [m for m in _markers(report) if m and math.isfinite(m) and m > 0]
    lo = min([*sizes, *markers]) / 1.5
    hi = max([*sizes, *markers]) * 1.5
    figures.batch_axis(ax, sizes, lo, hi, "effective batch size B (samples per update)")
    ax.set_yscale("log")
    ax.set_ylabel("optimizer steps to the target")
    ax.set_title(f"{report.title}\ntarget {report.target_text}", fontsize=10)
    xs = np.geomspace(lo, hi, 200)
    reached = table[table["steps_mean"].notna()]
    shown = _draw_reached(ax, reached, xs) if len(reached) else []  # every step count drawn
    shown += _draw_not_reached(ax, table)
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
    if report.knee is not None:
        _draw_knee(ax, report.knee, xs, lo, hi)
    if report.noise is not None:
        _draw_b_simple(ax, report.noise, lo, hi)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)


def _draw_reached(ax, reached: pd.DataFrame, xs: np.ndarray) -> list[float]:
    """The mean steps with their interval, each seed, and the perfect-scaling line through the
    smallest batch; returns the step counts drawn."""
    low = (reached["steps_mean"] - reached["steps_low"]).fillna(0.0)
    high = (reached["steps_high"] - reached["steps_mean"]).fillna(0.0)
    bars = ax.errorbar(
        reached["effective_batch_size"],
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
        for b, vs in zip(reached["effective_batch_size"], reached["steps_values"], strict=True)
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
    shown = [v for _, v in seeds] + reached["steps_high"].dropna().tolist()
    shown += (reached["steps_low"].dropna().clip(lower=1.0)).tolist()
    first = reached.iloc[0]
    b0, s0 = float(first["effective_batch_size"]), float(first["steps_mean"])
    ax.plot(
        xs,
        s0 * b0 / xs,
        ls="--",
        color="grey",
        lw=1.2,
        gid=GID_PERFECT,
        label=f"perfect scaling: steps ∝ 1/B from B = {int(b0)}",
    )
    return shown


def _draw_not_reached(ax, table: pd.DataFrame) -> list[float]:
    """Seeds that did not reach the target, at the steps they ran, and each batch size's count
    of them at the bottom; returns the step counts drawn."""
    censored = [
        (b, v)
        for b, vs in zip(table["effective_batch_size"], table["budget_steps"], strict=True)
        for v in vs
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
    for row in table.itertuples(index=False):
        missed = row.n_seeds - row.n_reached
        if missed:
            ax.text(
                row.effective_batch_size,
                0.02,
                f"{missed}/{row.n_seeds}\nmissed",
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=7,
                color="tab:red",
                gid=GID_NOT_REACHED_COUNT,
            )
    return [v for _, v in censored]


def _draw_knee(ax, knee: Knee, xs: np.ndarray, lo: float, hi: float) -> None:
    """The fitted curve, its regimes shaded, and the knee with its bootstrap interval."""
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


def _draw_b_simple(ax, noise: NoiseScale, lo: float, hi: float) -> None:
    """The measured B_simple and the median of the runs' intervals."""
    ax.axvline(
        noise.median,
        color="tab:purple",
        lw=1.8,
        gid=GID_B_SIMPLE,
        label=f"B_simple ≈ {samples_text(noise.median)}, median of {noise.n_runs} runs "
        "(bar: median 95% interval)",
    )
    if math.isfinite(noise.low):
        _interval_bar(ax, (noise.low, noise.high), 0.9, "tab:purple", lo, hi, GID_B_SIMPLE_BAND)


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


# --------------------------------------------------------------------------------------------
# Loss and B_simple over training
# --------------------------------------------------------------------------------------------


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
    panels = [(r, run_curves(curves, summary, r)) for r in reports]
    panels = [(r, rows) for r, rows in panels if len(rows)]
    if not panels:
        return placeholder_figure("no training curves in this sweep", title)
    fig, axes = _subplots(len(panels))
    for ax, (report, rows) in zip(axes, panels, strict=True):
        _draw_losses(ax, rows, x)
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


def _draw_losses(ax, rows: pd.DataFrame, x: str) -> None:
    """Each batch size's smoothed mean training loss, and its mean validation loss as points."""
    palette = _palette(sorted(set(rows["effective_batch_size"])))
    for batch, group in rows.groupby("effective_batch_size", sort=True):
        color = palette[int(batch)]
        train = _mean_curve(group, "loss")
        window = max(1, round(len(train) * SMOOTH_FRACTION))
        smooth = train["loss"].rolling(window, min_periods=1).mean()
        ax.plot(train[x], smooth, color=color, lw=1.2, label=f"B = {int(batch)}")
        if "val_loss" in group:
            val = _mean_curve(group, "val_loss")
            ax.plot(val[x], val["val_loss"], "o", color=color, ms=4, mec="white", mew=0.5)


def noise_figure(
    reports: Sequence[ModelReport], summary: pd.DataFrame, curves: pd.DataFrame
) -> Figure:
    """B_simple over training (samples seen), one line per batch size with its 95% band."""
    title = "Gradient noise scale B_simple over training"
    panels = []
    for report in reports:
        rows = run_curves(curves, summary, report)
        if rows.empty:
            continue
        by_batch = rows.groupby("effective_batch_size", sort=True)
        history = {int(b): noise_history(g) for b, g in by_batch}
        history = {b: h for b, h in history.items() if len(h)}
        if history:
            panels.append((report, history))
    if not panels:
        return placeholder_figure(NO_NOISE, title)
    fig, axes = _subplots(len(panels))
    for ax, (report, history) in zip(axes, panels, strict=True):
        drawn = _draw_noise_history(ax, history)
        if report.knee is not None and report.knee.b_noise is not None:
            ax.axhline(
                report.knee.b_noise,
                color="black",
                ls=":",
                lw=1.5,
                label=f"knee B_noise ≈ {report.knee.b_noise:.0f}",
            )
        if drawn:  # a log axis needs a positive value (a run of a few updates may have none)
            ax.set_yscale("log")
        ax.set_xlabel("samples seen")
        ax.set_ylabel("B_simple (samples)")
        ax.set_title(report.title, fontsize=10)
        ax.legend(title="batch size", fontsize=7, title_fontsize=7)
    fig.suptitle(title)
    return fig


def _draw_noise_history(ax, history: dict[int, pd.DataFrame]) -> bool:
    """Each batch size's binned B_simple (``noise_history``) as a line with its 95% band;
    whether any positive value was drawn."""
    palette = _palette(list(history))
    drawn = False
    for batch, h in history.items():
        shown = h[np.isfinite(h["b_simple"]) & (h["b_simple"] > 0)]
        drawn = drawn or not shown.empty
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
    return drawn


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
