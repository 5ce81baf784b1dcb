"""The sweep's line figures: throughput, peak memory and validation accuracy vs batch size, one
line per DataLoader worker count, one panel per mode x model.

Spread: a line's point is the mean over the seeds that ran ok, with the 95% Student-t confidence
interval (``batchscope.core.stats.mean_ci``) as error bars when two or more did. For throughput
with a single seed the point is the median of the measurement windows' throughputs and the bar
spans median ± IQR/2 of them; a noisy point (windows' IQR over 10% of the median) is drawn
hollow. The throughput figure also draws the compute-only ceiling when the sweep measured it, and
the memory figure the largest-batch search (``batchscope.bench.maxbatch``) when given one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from batchscope.core.stats import mean_ci
from batchscope.report.figures import placeholder_figure, subplots
from batchscope.report.plots.panels import (
    NO_RUNS,
    NO_TRAIN_RUNS,
    PANEL_KEYS,
    log2_batch_axis,
    mark_failed,
    palette,
    panel_title,
    panels,
)
from batchscope.report.recommend import answer as answer_module
from batchscope.report.summary import point_table, result_files

#: Label of the vertical line at the largest-batch search's limit on the memory figure.
LIMIT_LABEL = "largest batch that fits"

#: Legend entry of a hollow (noisy) point.
NOISY_LABEL = "noisy (window IQR > 10% of median)"


def throughput_figure(
    summary: pd.DataFrame,
    answer: Mapping[str, Any] | None = None,
    eliminated: Mapping[tuple, int] | None = None,
) -> Figure:
    """Samples per second vs batch size, hue = num_workers, a panel per mode x model; error bars
    are the runs' 95% CI, or one run's measurement windows' IQR; noisy points hollow. With the
    ``answer`` (results/recommendation.json), its pick is starred and the rest of its tie set
    ringed; ``eliminated`` ((mode, model, batch, accumulation, workers) -> round) marks the
    points the race dropped with a cross."""
    marks = None
    if answer is not None or eliminated:
        marks = _verdict_marks(answer or {"answers": []}, eliminated or {})
    return _metric_figure(
        summary,
        "samples_per_s",
        "throughput (samples/s)",
        "Throughput",
        NO_RUNS,
        iqr="samples_per_s_iqr",
        ceiling="ceiling_samples_per_s",
        marks=marks,
    )


def _verdict_marks(answer: Mapping[str, Any], eliminated: Mapping[tuple, int]):
    """A function that draws, on one panel, the pick, its tie set and the eliminated points."""
    answers = answer_module.by_group(answer)

    def draw(ax, key: tuple, points: pd.DataFrame, y: str) -> list[Line2D]:
        mode, model, dataset, sequence_length, accumulation, devices = key
        length = None if pd.isna(sequence_length) else int(sequence_length)
        at = {(int(r.batch_size), int(r.num_workers)): getattr(r, y) for r in points.itertuples()}
        handles = []
        found = answers.get((mode, model, dataset, length, int(accumulation), int(devices)))
        if found is not None:
            chosen = found["pick"]  # None: disturbed, no point is named
            pick = None if chosen is None else (chosen["batch_size"], chosen["num_workers"])
            tied = [(m["batch_size"], m["num_workers"]) for m in found["tie_set"]]
            ring = [p for p in tied if p != pick and p in at]
            ring_style = {"facecolors": "none", "edgecolors": "black", "linewidths": 1.2}
            if ring:
                xs, ys = [b for b, _ in ring], [at[p] for p in ring]
                ax.scatter(xs, ys, s=160, zorder=5, gid="tie_set", **ring_style)
                handles.append(Line2D([], [], marker="o", markerfacecolor="none", color="black",
                                      linestyle="none", label="tied with the pick"))  # fmt: skip
            if pick in at:
                ax.scatter([pick[0]], [at[pick]], marker="*", s=260, color="black", zorder=6,
                           gid="pick")  # fmt: skip
                verdict = found["verdict"].replace("_", " ")
                handles.append(Line2D([], [], marker="*", color="black", linestyle="none",
                                      label=f"pick ({verdict})"))  # fmt: skip
        dropped = [
            (b, w) for (m, mo, s, b, a, w, d) in eliminated
            if (m, mo, s, a, d) == (mode, model, length, int(accumulation), int(devices))
            and (b, w) in at
        ]  # fmt: skip
        if dropped:
            ax.scatter([b for b, _ in dropped], [at[p] for p in dropped], marker="x", s=80,
                       color="black", zorder=6, gid="eliminated")  # fmt: skip
            handles.append(Line2D([], [], marker="x", color="black", linestyle="none",
                                  label="left the race (slower)"))  # fmt: skip
        return handles

    return draw


def peak_memory_figure(
    summary: pd.DataFrame, maxbatch: Mapping[tuple[str, str], Mapping[str, Any]] | None = None
) -> Figure:
    """Peak memory (MB) vs batch size, hue = num_workers, a panel per mode x model; with
    ``maxbatch`` ((mode, model) -> search result), the largest batch that fits and the search's
    trials."""
    return _metric_figure(
        summary, "peak_mem_mb", "peak memory (MB)", "Peak memory", NO_RUNS, maxbatch=maxbatch
    )


def val_accuracy_figure(summary: pd.DataFrame) -> Figure:
    """Validation accuracy after training vs batch size, hue = num_workers, a panel per model."""
    train = summary[summary["mode"] == "train"] if not summary.empty else summary
    return _metric_figure(
        train,
        "val_accuracy",
        "validation accuracy (fraction)",
        "Validation accuracy",
        NO_TRAIN_RUNS,
        dodge=True,  # the worker count does not change what is learnt: equal lines
    )


def _metric_figure(
    summary: pd.DataFrame,
    y: str,
    ylabel: str,
    title: str,
    empty_message: str,
    *,
    iqr: str | None = None,
    maxbatch: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
    ceiling: str | None = None,
    marks=None,
    dodge: bool = False,
) -> Figure:
    """``y`` vs batch size, one line per num_workers, one panel per mode x model.

    Points are means over the ok seeds with the 95% confidence interval as error bars when there
    are several; with ``iqr`` a single seed's bars are ± half of that column. ``maxbatch`` maps
    (mode, model) to a largest-batch search result, drawn on its panel (``_draw_search``).
    ``ceiling`` names a column drawn as a dashed black line: the compute-only ceiling.
    With ``dodge``, each worker count's line is shifted a little along x (``_dodge_factors``),
    so that equal values side by side do not hide one another.
    """
    summary = result_files.with_grid_defaults(summary)
    grouped = panels(summary, PANEL_KEYS)
    if not grouped:
        return placeholder_figure(empty_message, title)
    colours = palette(summary["num_workers"])
    fig, axes = subplots(len(grouped))
    sources: set = set()
    for ax, (key, rows) in zip(axes, grouped, strict=True):
        points = _line_points(rows, y, iqr)
        sources |= set(points["spread"].dropna())
        handles = []
        if points.empty:
            ax.text(0.5, 0.6, "no successful runs", ha="center", transform=ax.transAxes)
        else:
            shift = _dodge_factors(points) if dodge else None
            handles = _draw_lines(ax, points, y, colours, mark_noisy=iqr is not None, shift=shift)
            if marks is not None:
                handles += marks(ax, key, points, y)
        if ceiling and ceiling in rows and rows[ceiling].notna().any():
            handles.append(_draw_ceiling(ax, rows, ceiling))
        search = (maxbatch or {}).get((key[0], key[1]))
        ticks, span = [], []
        if search:
            search_handles, ticks, span = _draw_search(ax, search)
            handles += search_handles
        ax.set_ylim(bottom=0)
        log2_batch_axis(ax, rows["batch_size"], ticks, span)
        handles += mark_failed(ax, rows)
        ax.set_ylabel(ylabel)
        ax.set_title(panel_title(key))
        if handles:
            ax.legend(handles=handles, title="num_workers", fontsize=8, title_fontsize=8)
    fig.suptitle(title + _spread_note(sources))
    return fig


def _line_points(rows: pd.DataFrame, y: str, iqr: str | None = None) -> pd.DataFrame:
    """Per (num_workers, batch_size) with an ok value of ``y``: ``y`` (the mean over ok seeds),
    ``lower``/``upper`` (error bar lengths), ``spread`` (``ci``, ``iqr`` or None) and ``noisy``.

    Two or more ok seeds give the 95% confidence interval of the mean; one seed gives ± half the
    ``iqr`` column (the spread of its measurement windows) when there is one.
    """
    ok = rows[(rows["status"] == "ok") & pd.to_numeric(rows[y]).notna()]
    points = []
    for (workers, batch), group in ok.groupby(["num_workers", "batch_size"], sort=True):
        mean, low, high = mean_ci(group[y])
        lower = upper = 0.0
        spread = None
        if len(group) >= 2:
            lower, upper, spread = mean - low, high - mean, "ci"
        elif iqr and iqr in group and pd.notna(half := pd.to_numeric(group[iqr]).iloc[0] / 2):
            lower, upper, spread = half, half, "iqr"
        noisy = point_table.any_noisy(group["noisy"]) if "noisy" in group else None
        points.append(
            {
                "num_workers": int(workers),
                "batch_size": int(batch),
                y: mean,
                "lower": lower,
                "upper": upper,
                "spread": spread,
                "noisy": bool(noisy),
            }
        )
    columns = ["num_workers", "batch_size", y, "lower", "upper", "spread", "noisy"]
    return pd.DataFrame(points, columns=columns)


def _dodge_factors(points: pd.DataFrame) -> dict[int, float]:
    """Per worker count, the factor its batch sizes are drawn at: side by side around the true
    batch size on the log2 axis, a few hundredths of the axis apart and all within its margin
    (the axis reaches 1.4x beyond the batch sizes)."""
    workers = sorted(points["num_workers"].unique())
    if len(workers) < 2:
        return {int(w): 1.0 for w in workers}
    octaves = np.log2(points["batch_size"].max() / points["batch_size"].min())
    step = min(0.035 * max(octaves, 3.0), 0.6 / (len(workers) - 1))
    middle = (len(workers) - 1) / 2
    return {int(w): float(2 ** (step * (i - middle))) for i, w in enumerate(workers)}


def _draw_lines(
    ax, points: pd.DataFrame, y: str, colours, mark_noisy: bool, shift=None
) -> list[Line2D]:
    """One line per worker count with error bars; with ``mark_noisy``, noisy points hollow;
    ``shift`` maps a worker count to the factor its x values are drawn at (``_dodge_factors``).
    Returns legend handles."""
    handles = []
    if not mark_noisy:
        points = points.assign(noisy=False)
    for workers, line in points.groupby("num_workers", sort=True):
        label = str(workers)
        color = colours[label]
        x, values = line["batch_size"].to_numpy(), line[y].to_numpy(dtype=float)
        x = x * (shift or {}).get(int(workers), 1.0)
        ax.plot(x, values, color=color, linewidth=1.6, label=label, gid=f"workers={label}")
        if (line["spread"].notna()).any():
            ax.errorbar(
                x,
                values,
                yerr=[line["lower"].to_numpy(dtype=float), line["upper"].to_numpy(dtype=float)],
                fmt="none",
                ecolor=color,
                capsize=3,
                linewidth=1.2,
            )
        noisy = line["noisy"].to_numpy(dtype=bool)
        ax.scatter(x[~noisy], values[~noisy], color=color, s=30, zorder=4)
        ax.scatter(
            x[noisy],
            values[noisy],
            facecolors="white",
            edgecolors=[color],
            linewidths=1.6,
            s=40,
            zorder=4,
            gid="noisy",
        )
        handles.append(Line2D([], [], color=color, marker="o", label=label))
    if points["noisy"].any():
        handles.append(
            Line2D(
                [],
                [],
                linestyle="none",
                marker="o",
                markerfacecolor="white",
                color="grey",
                label=NOISY_LABEL,
            )
        )
    return handles


def _draw_ceiling(ax, rows: pd.DataFrame, ceiling: str) -> Line2D:
    """The compute-only ceiling (the ``ceiling`` column, mean per batch size) as a dashed black
    line; returns it for the legend."""
    top = rows.groupby("batch_size")[ceiling].mean().dropna().sort_index()
    (line,) = ax.plot(top.index, top.values, "k--", marker="_", linewidth=1)
    line.set_label("compute-only ceiling\n(synthetic data, 0 workers)")
    return line


def _spread_note(sources: set) -> str:
    """What the error bars of a figure are, for its title."""
    parts = []
    if "ci" in sources:
        parts.append("95% CI of the mean over runs (seeds x rounds)")
    if "iqr" in sources:
        parts.append("one run: median ± IQR/2 of its measurement windows")
    return f" (error bars: {'; '.join(parts)})" if parts else ""


# --------------------------------------------------------------------------------------------
# The largest-batch search, on the memory figure
# --------------------------------------------------------------------------------------------


def _draw_search(ax, search: Mapping[str, Any]) -> tuple[list, list[int], list[int]]:
    """The largest-batch search on a memory panel: its trials' memory curve, the trials that did
    not fit (where they reported memory), the usable memory and a vertical line at the limit.
    Returns legend handles, the sizes to label on the x axis (the limit) and the sizes the axis
    must span (the trials)."""
    handles, span = _draw_trials(ax, search)
    usable = search.get("usable_mb")
    if usable is not None:
        handles.append(
            ax.axhline(
                float(usable), color="dimgrey", linestyle=":", label="usable memory (search)"
            )
        )
    ticks: list[int] = []
    limit = search.get("limit")
    if limit is not None:
        handles.append(_draw_limit(ax, int(limit)))
        ticks.append(int(limit))
    return handles, ticks, span


def _draw_trials(ax, search: Mapping[str, Any]) -> tuple[list, list[int]]:
    """The search's trials that ran (a memory curve) and those that did not fit but reported
    memory (crosses); returns legend handles and the batch sizes drawn."""
    handles: list = []
    span: list[int] = []
    curve = [c for c in search.get("curve") or [] if c.get("peak_mem_mb") is not None]
    if curve:
        xs = [int(c["batch_size"]) for c in curve]
        ys = [float(c["peak_mem_mb"]) for c in curve]
        (line,) = ax.plot(
            xs,
            ys,
            color="dimgrey",
            linestyle="--",
            marker=".",
            linewidth=1,
            label="search trials that ran",
        )
        handles.append(line)
        span += xs
    misses = [
        t
        for t in search.get("trials") or []
        if not t.get("fits") and t.get("peak_mem_mb") is not None
    ]
    if misses:
        marks = ax.scatter(
            [int(t["batch_size"]) for t in misses],
            [float(t["peak_mem_mb"]) for t in misses],
            marker="x",
            color="dimgrey",
            s=40,
            label="search trials that did not fit",
        )
        handles.append(marks)
        span += [int(t["batch_size"]) for t in misses]
    return handles, span


def _draw_limit(ax, limit: int) -> Line2D:
    """A labelled vertical line at the largest batch that fits; returns it for the legend."""
    line = ax.axvline(limit, color="black", linestyle="-.", linewidth=1.2, label=LIMIT_LABEL)
    ax.annotate(
        f"{LIMIT_LABEL}: {limit}",
        (limit, 0.98),
        xycoords=ax.get_xaxis_transform(),
        xytext=(-4, 0),
        textcoords="offset points",
        ha="right",
        va="top",
        fontsize=8,
    )
    return line
