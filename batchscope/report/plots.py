"""Figures of a sweep, from the summary and curves CSVs that ``batchscope.report.aggregate`` writes.

Each ``*_figure`` function takes DataFrames and returns a matplotlib Figure; ``main`` writes them
all as PNGs with fixed names. Failed grid points are drawn, not dropped: OOM is a red "x",
diverged an orange triangle, a job that failed a black "X" and a result that is missing a grey
square, at the bottom of the axis, each labelled; heatmap cells and step-time bars say "OOM",
"diverged", "failed" or "missing". A figure with nothing to show says so in words instead of
failing.

Spread: a line's point is the mean over the seeds that ran ok, with the 95% Student-t confidence
interval as error bars when two or more did. For throughput with a single seed the point is the
median of the measurement windows' throughputs and the bar spans median ± IQR/2 of them; a
noisy point (windows' IQR over 10% of the median) is drawn hollow.

Command line::

    python -m batchscope.report.plots --summary results/summary.csv --curves results/curves.csv \\
        --outdir results/plots [--maxbatch results/maxbatch/train/small_cnn.json ...]

``--maxbatch`` takes the largest-batch search's outputs (``batchscope.bench.maxbatch``): the peak
memory figure then marks the largest batch that fits and draws the search's trials.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: figures are files, never windows

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from batchscope.core import results  # noqa: E402
from batchscope.core.results import GRID_KEYS  # noqa: E402
from batchscope.core.stats import mean_ci  # noqa: E402
from batchscope.report import aggregate  # noqa: E402
from batchscope.report.figures import (  # noqa: E402
    batch_axis,
    placeholder_figure,
    save_png,
    subplots,
)

#: A panel shows one mode x model (x dataset, which is a single one per model in a usual sweep).
#: One panel per distinct value of these; a sweep with several ``accumulation_steps`` (a
#: training axis) gets a panel per value, so micro-batch sizes stay on one x axis.
PANEL_KEYS = ["mode", "model", "dataset", "accumulation_steps"]

#: How a failed grid point is drawn; ``label`` is the text shown on the axis and in the legend.
FAILED_STYLE = {
    "oom": {"label": "OOM", "marker": "x", "color": "red"},
    "diverged": {"label": "diverged", "marker": "v", "color": "darkorange"},
    "failed": {"label": "failed", "marker": "X", "color": "black"},
    "missing": {"label": "missing", "marker": "s", "color": "grey"},
}

#: The per-step time breakdown: (label, summary column), bottom to top in the stacked bars.
BREAKDOWN_PARTS = (
    ("runner", "time_runner_ms"),
    ("data wait", "time_data_wait_ms"),
    ("host-to-device copy", "time_h2d_ms"),
    ("forward", "time_forward_ms"),
    ("backward", "time_backward_ms"),
    ("optimizer", "time_optimizer_ms"),
    ("other", "time_other_ms"),
)
STEP_TIME = "step_time_ms_mean"

#: Failures that leave a training run without steps, as the loss panel lists them.
NO_STEPS = {
    "oom": "OOM (no steps)",
    "failed": "failed (no result)",
    "missing": "missing (no result)",
}

#: Label of the vertical line at the largest-batch search's limit on the memory figure.
LIMIT_LABEL = "largest batch that fits"

#: Legend entry of a hollow (noisy) point.
NOISY_LABEL = "noisy (window IQR > 10% of median)"

NO_RUNS = "no runs in this sweep"
NO_TRAIN_RUNS = "no training runs in this sweep"
NO_BREAKDOWN = "no step-time breakdown in these results"


def _panel_title(key: Sequence) -> str:
    mode, model, dataset, accumulation = key
    title = f"{mode} / {model} ({dataset})"
    if accumulation != 1:
        steps = int(accumulation)
        title += f"\n{steps} accumulation steps (effective batch = batch size x {steps})"
    return title


def _panels(frame: pd.DataFrame, keys: list[str]) -> list[tuple[tuple, pd.DataFrame]]:
    """Sub-frames per distinct ``keys`` value, in sorted order."""
    if frame.empty:
        return []
    return [(k, sub) for k, sub in frame.groupby(keys, sort=True, dropna=False)]


def _select(frame: pd.DataFrame, key: Sequence) -> pd.DataFrame:
    """Rows of ``frame`` whose PANEL_KEYS equal ``key``."""
    mask = pd.Series(True, index=frame.index)
    for column, value in zip(PANEL_KEYS, key, strict=True):
        mask &= frame[column] == value
    return frame[mask]


def _log2_batch_axis(ax, batch_sizes, extra=(), span=()) -> None:
    """Log2 x axis whose ticks are exactly the batch sizes measured (7 or 50 included) and the
    ``extra`` sizes (a search's limit, say); ``span`` widens the axis to more sizes, unlabelled."""
    sizes = sorted({int(b) for b in batch_sizes} | {int(b) for b in extra})
    ends = sorted({*sizes, *(int(b) for b in span)})
    rotation = 45 if len(sizes) > 8 else 0
    batch_axis(ax, sizes, ends[0] / 1.4, ends[-1] * 1.4, "batch size (samples)", rotation=rotation)


def _mark_failed(ax, rows: pd.DataFrame) -> list[Line2D]:
    """Draw failed grid points at the bottom of ``ax``, labelled; returns legend handles.

    Positions are in data units along x and axes units along y, so the marks stay on screen
    whatever the y range, and do not need a y value (a failed run may have none).
    """
    handles = []
    bottom = ax.get_xaxis_transform()
    present = [status for status in FAILED_STYLE if (rows["status"] == status).any()]
    for level, status in enumerate(present):
        style = FAILED_STYLE[status]
        sizes = sorted({int(b) for b in rows.loc[rows["status"] == status, "batch_size"]})
        y = 0.05 + 0.12 * level
        ax.scatter(
            sizes,
            [y] * len(sizes),
            transform=bottom,
            marker=style["marker"],
            color=style["color"],
            s=70,
            linewidths=2,
            zorder=5,
            clip_on=False,
        )
        for size in sizes:
            ax.annotate(
                style["label"],
                (size, y),
                xycoords=bottom,
                xytext=(0, 6),
                textcoords="offset points",
                ha="center",
                fontsize=8,
                color=style["color"],
            )
        handles.append(_failed_handle(status))
    return handles


def _failed_handle(status: str, label: str | None = None) -> Line2D:
    style = FAILED_STYLE[status]
    return Line2D(
        [],
        [],
        linestyle="none",
        marker=style["marker"],
        color=style["color"],
        markeredgewidth=2,
        label=label or style["label"],
    )


def _palette(values) -> dict[str, tuple]:
    """One colour per distinct value (as its string label), in numeric order."""
    ordered = [str(v) for v in sorted({int(v) for v in values})]
    return dict(zip(ordered, sns.color_palette("colorblind", len(ordered)), strict=True))


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
        noisy = aggregate.any_noisy(group["noisy"]) if "noisy" in group else None
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


def _draw_lines(ax, points: pd.DataFrame, y: str, palette, mark_noisy: bool) -> list[Line2D]:
    """One line per worker count with error bars; with ``mark_noisy``, noisy points hollow.
    Returns legend handles."""
    handles = []
    if not mark_noisy:
        points = points.assign(noisy=False)
    for workers, line in points.groupby("num_workers", sort=True):
        label = str(workers)
        color = palette[label]
        x, values = line["batch_size"].to_numpy(), line[y].to_numpy(dtype=float)
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


def _spread_note(sources: set) -> str:
    """What the error bars of a figure are, for its title."""
    parts = []
    if "ci" in sources:
        parts.append("95% CI of the mean over seeds")
    if "iqr" in sources:
        parts.append("one seed: median ± IQR/2 of the measurement windows")
    return f" (error bars: {'; '.join(parts)})" if parts else ""


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
) -> Figure:
    """``y`` vs batch size, one line per num_workers, one panel per mode x model.

    Points are means over the ok seeds with the 95% confidence interval as error bars when there
    are several; with ``iqr`` a single seed's bars are ± half of that column. ``maxbatch`` maps
    (mode, model) to a largest-batch search result, drawn on its panel (``_draw_search``).
    ``ceiling`` names a column drawn as a dashed black line: the compute-only ceiling.
    """
    summary = aggregate.with_accumulation(summary)
    panels = _panels(summary, PANEL_KEYS)
    if not panels:
        return placeholder_figure(empty_message, title)
    palette = _palette(summary["num_workers"])
    fig, axes = subplots(len(panels))
    sources: set = set()
    for ax, (key, rows) in zip(axes, panels, strict=True):
        points = _line_points(rows, y, iqr)
        sources |= set(points["spread"].dropna())
        handles = []
        if points.empty:
            ax.text(0.5, 0.6, "no successful runs", ha="center", transform=ax.transAxes)
        else:
            handles = _draw_lines(ax, points, y, palette, mark_noisy=iqr is not None)
        if ceiling and ceiling in rows and rows[ceiling].notna().any():
            top = rows.groupby("batch_size")[ceiling].mean().dropna().sort_index()
            (line,) = ax.plot(top.index, top.values, "k--", marker="_", linewidth=1)
            line.set_label("compute-only ceiling\n(synthetic data, 0 workers)")
            handles.append(line)
        search = (maxbatch or {}).get((key[0], key[1]))
        ticks, span = [], []
        if search:
            search_handles, ticks, span = _draw_search(ax, search)
            handles += search_handles
        ax.set_ylim(bottom=0)
        _log2_batch_axis(ax, rows["batch_size"], ticks, span)
        handles += _mark_failed(ax, rows)
        ax.set_ylabel(ylabel)
        ax.set_title(_panel_title(key))
        if handles:
            ax.legend(handles=handles, title="num_workers", fontsize=8, title_fontsize=8)
    fig.suptitle(title + _spread_note(sources))
    return fig


def _draw_search(ax, search: Mapping[str, Any]) -> tuple[list, list[int], list[int]]:
    """The largest-batch search on a memory panel: its trials' memory curve, the trials that did
    not fit (where they reported memory), the usable memory and a vertical line at the limit.
    Returns legend handles, the sizes to label on the x axis (the limit) and the sizes the axis
    must span (the trials)."""
    handles: list = []
    ticks: list[int] = []
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
    usable = search.get("usable_mb")
    if usable is not None:
        handles.append(
            ax.axhline(
                float(usable), color="dimgrey", linestyle=":", label="usable memory (search)"
            )
        )
    limit = search.get("limit")
    if limit is not None:
        limit = int(limit)
        handles.append(
            ax.axvline(limit, color="black", linestyle="-.", linewidth=1.2, label=LIMIT_LABEL)
        )
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
        ticks.append(limit)
    return handles, ticks, span


def throughput_figure(summary: pd.DataFrame) -> Figure:
    """Samples per second vs batch size, hue = num_workers, a panel per mode x model; error bars
    are the seeds' 95% CI, or one seed's measurement windows' IQR; noisy points hollow."""
    return _metric_figure(
        summary,
        "samples_per_s",
        "throughput (samples/s)",
        "Throughput",
        NO_RUNS,
        iqr="samples_per_s_iqr",
        ceiling="ceiling_samples_per_s",
    )


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
    )


def _failure_label(statuses) -> str:
    """The label of the first failure status (in FAILED_STYLE order) among ``statuses``."""
    for status, style in FAILED_STYLE.items():
        if status in set(statuses):
            return style["label"]
    return ""


def _heatmap_cells(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mean data_wait_frac of ok runs per (batch_size, num_workers), and a failure label per cell
    ("OOM", "diverged", "failed", "missing"; empty where some run was ok or the point was not in
    the sweep)."""
    index = sorted({int(b) for b in rows["batch_size"]})
    columns = sorted({int(w) for w in rows["num_workers"]})
    ok = rows[(rows["status"] == "ok") & rows["data_wait_frac"].notna()]
    values = (
        ok.groupby(["batch_size", "num_workers"])["data_wait_frac"]
        .mean()
        .unstack()
        .reindex(index=index, columns=columns)
        .astype(float)
    )
    labels = pd.DataFrame("", index=index, columns=columns)
    for (batch, workers), cell in rows.groupby(["batch_size", "num_workers"]):
        if pd.isna(values.loc[batch, workers]):
            labels.loc[batch, workers] = _failure_label(cell["status"])
    return values, labels


def data_wait_figure(summary: pd.DataFrame) -> Figure:
    """Heatmap of the share of step time spent waiting for data: batch size x num_workers,
    one panel per mode x model, each cell annotated."""
    title = "Data wait"
    summary = aggregate.with_accumulation(summary)
    panels = _panels(summary, PANEL_KEYS)
    if not panels:
        return placeholder_figure(NO_RUNS, title)
    fig, axes = subplots(len(panels), width=5.2, height=4.2)
    for ax, (key, rows) in zip(axes, panels, strict=True):
        values, labels = _heatmap_cells(rows)
        ax.set_facecolor("#dddddd")  # masked (no ok run) cells show this grey
        sns.heatmap(
            values,
            ax=ax,
            vmin=0,
            vmax=1,
            cmap="rocket_r",
            annot=True,
            fmt=".2f",
            linewidths=0.5,
            cbar_kws={"label": "data wait (fraction of step time)"},
        )
        for i, batch in enumerate(labels.index):
            for j, workers in enumerate(labels.columns):
                text = labels.loc[batch, workers]
                if text:
                    ax.text(
                        j + 0.5,
                        i + 0.5,
                        text,
                        ha="center",
                        va="center",
                        fontsize=9,
                        fontweight="bold",
                        color="red",
                    )
        ax.set_xlabel("num_workers")
        ax.set_ylabel("batch size (samples)")
        ax.set_title(_panel_title(key))
    fig.suptitle(title + " (mean over seeds of ok runs)")
    return fig


def loss_curves_figure(curves: pd.DataFrame, summary: pd.DataFrame | None = None) -> Figure:
    """Training loss vs samples seen (warm-up and measured steps), one line per batch size, one
    panel per model.

    A batch size's line is the mean over its runs (workers, seeds) that did not diverge, with a
    band of one standard deviation; warm-up steps are on the line, marked by open circles. With
    ``summary``, each diverged run is drawn on its own and ends in a marker, and batch sizes
    without steps (OOM, a failed job, a missing result) are listed on the panel.
    """
    title = "Training loss"
    curves = aggregate.with_accumulation(curves)
    summary = None if summary is None else aggregate.with_accumulation(summary)
    train = curves[curves["mode"] == "train"] if not curves.empty else curves
    train = train.assign(loss=pd.to_numeric(train["loss"]).replace([np.inf, -np.inf], np.nan))
    train = train[train["loss"].notna()]
    failed = pd.DataFrame(columns=[*PANEL_KEYS, "batch_size", "status"])
    if summary is not None and not summary.empty:
        failed = summary[(summary["mode"] == "train") & (summary["status"] != "ok")]
        statuses = summary[[*GRID_KEYS, "status"]]
        train = train.drop(columns="status", errors="ignore").merge(statuses, how="left")
    train = train.assign(status=train.get("status", pd.Series(dtype=str)).fillna("ok"))
    keys = sorted(
        {tuple(k) for k in train[PANEL_KEYS].itertuples(index=False)}
        | {tuple(k) for k in failed[PANEL_KEYS].itertuples(index=False)}
    )
    if not keys:
        return placeholder_figure(NO_TRAIN_RUNS, title)
    palette = _palette(pd.concat([train["batch_size"], failed["batch_size"]]))
    fig, axes = subplots(len(keys), width=5.4)
    for ax, key in zip(axes, keys, strict=True):
        rows = _select(train, key).assign(batch=lambda d: d["batch_size"].astype(int).astype(str))
        handles = _draw_loss_panel(ax, rows, _select(failed, key), palette)
        ax.set_title(_panel_title(key))
        ax.set_xlabel("samples seen (samples)")
        ax.set_ylabel("training loss")
        if handles:
            ax.legend(handles=handles, title="batch size", fontsize=8, title_fontsize=8)
    fig.suptitle(title)
    return fig


def _draw_loss_panel(ax, rows: pd.DataFrame, fails: pd.DataFrame, palette) -> list:
    """Draw one model's loss curves and failure marks; returns legend handles."""
    handles = []
    hue_order = [b for b in palette if b in set(rows["batch"])]
    if rows.empty:
        ax.text(0.5, 0.6, "no training steps recorded", ha="center", transform=ax.transAxes)
    else:
        handles += [Line2D([], [], color=palette[b], label=b) for b in hue_order]
        handles.append(
            Line2D(
                [],
                [],
                color="grey",
                marker="o",
                markerfacecolor="none",
                linestyle="none",
                label="warm-up step",
            )
        )
    healthy = rows[rows["status"] != "diverged"]
    if not healthy.empty:
        sns.lineplot(
            data=healthy,
            x="samples_seen",
            y="loss",
            hue="batch",
            hue_order=hue_order,
            palette=palette,
            estimator="mean",
            errorbar="sd",
            legend=False,
            ax=ax,
        )
    warmup = rows[rows["phase"] == "warmup"].groupby(["batch", "samples_seen"], as_index=False)
    for _, point in warmup["loss"].mean().iterrows():
        ax.scatter(
            [point["samples_seen"]],
            [point["loss"]],
            marker="o",
            s=22,
            facecolors="none",
            edgecolors=[palette[point["batch"]]],
            zorder=4,
        )
    style = FAILED_STYLE["diverged"]
    diverged = rows[rows["status"] == "diverged"].sort_values("samples_seen")
    labelled = set()
    for (batch, _, _), run in diverged.groupby(["batch", "num_workers", "seed"]):
        ax.plot(run["samples_seen"], run["loss"], color=palette[batch], linewidth=1, alpha=0.8)
        x, y = run["samples_seen"].iloc[-1], run["loss"].iloc[-1]
        ax.scatter([x], [y], marker=style["marker"], color=style["color"], s=70, zorder=5)
        if batch in labelled:
            continue
        labelled.add(batch)
        ax.annotate(
            f"bs {batch} diverged",
            (x, y),
            xytext=(4, 4),
            textcoords="offset points",
            fontsize=8,
            color=style["color"],
        )
    diverged_sizes = sorted(
        {int(b) for b in fails.loc[fails["status"] == "diverged", "batch_size"]}
    )
    if diverged_sizes:
        handles.append(_failed_handle("diverged", "diverged: " + _sizes(diverged_sizes)))
    level = 0
    for status, text in NO_STEPS.items():
        sizes = sorted({int(b) for b in fails.loc[fails["status"] == status, "batch_size"]})
        if not sizes:
            continue
        ax.text(
            0.02,
            0.04 + 0.07 * level,
            f"{text}: batch size {_sizes(sizes)}",
            transform=ax.transAxes,
            color=FAILED_STYLE[status]["color"],
            fontsize=9,
            fontweight="bold",
        )
        handles.append(_failed_handle(status, f"{FAILED_STYLE[status]['label']}: {_sizes(sizes)}"))
        level += 1
    return handles


def _sizes(sizes) -> str:
    return ", ".join(str(s) for s in sizes)


def _breakdown_positions(cells: list[tuple[int, int]]) -> list[float]:
    """x positions of (batch_size, num_workers) cells: worker counts side by side, a gap between
    batch sizes."""
    workers = sorted({w for _, w in cells})
    sizes = sorted({b for b, _ in cells})
    return [sizes.index(b) * (len(workers) + 1) + workers.index(w) for b, w in cells]


def breakdown_figure(summary: pd.DataFrame) -> Figure:
    """Stacked bars of the mean step time (ms) per batch size and worker count, split into the
    runner's bookkeeping, data wait, host-to-device copy, forward, backward, optimizer and the
    rest; one panel per mode x model. A bar is the mean over the point's ok seeds, so its parts
    add up to the mean step time (marked by a black dash); failed points are labelled."""
    title = "Step time breakdown"
    columns = [column for _, column in BREAKDOWN_PARTS if column in summary]
    summary = aggregate.with_accumulation(summary)
    panels = _panels(summary, PANEL_KEYS)
    if not panels:
        return placeholder_figure(NO_RUNS, title)
    ok = summary[summary["status"] == "ok"]
    if not columns or ok[columns].apply(pd.to_numeric).isna().all(axis=None):
        return placeholder_figure(NO_BREAKDOWN, title)
    colors = dict(
        zip(
            [label for label, _ in BREAKDOWN_PARTS],
            sns.color_palette("colorblind", len(BREAKDOWN_PARTS)),
            strict=True,
        )
    )
    fig, axes = subplots(len(panels), width=5.6, height=4.2)
    handles: dict[str, Any] = {}
    for ax, (key, rows) in zip(axes, panels, strict=True):
        pairs = rows[["batch_size", "num_workers"]].astype(int).itertuples(index=False)
        cells = sorted({(b, w) for b, w in pairs})
        position = dict(zip(cells, _breakdown_positions(cells), strict=True))
        handles.update(_draw_breakdown(ax, rows, position, colors))
        ax.set_xticks(
            list(position.values()),
            [f"{b}/{w}" for b, w in position],
            rotation=45 if len(position) > 6 else 0,
        )
        ax.set_xlabel("batch size / num_workers")
        ax.set_ylabel("mean step time (ms)")
        ax.set_title(_panel_title(key))
    if handles:  # one legend for every panel, beside them, in stacking order (top first)
        order = [label for label, _ in reversed(BREAKDOWN_PARTS)] + ["mean step time"]
        labels = [label for label in order if label in handles]
        fig.legend([handles[label] for label in labels], labels, loc="outside right upper")
    fig.suptitle(title + " (mean over seeds of ok runs)")
    return fig


def _draw_breakdown(ax, rows: pd.DataFrame, position: dict, colors: dict) -> dict[str, Any]:
    """One panel of ``breakdown_figure``: the stacks, the step-time dashes, the failure labels.
    Returns legend handles by label."""
    parts = [(label, c) for label, c in BREAKDOWN_PARTS if c in rows]
    numeric = [c for _, c in parts] + ([STEP_TIME] if STEP_TIME in rows else [])
    ok = rows[rows["status"] == "ok"]
    means = (
        ok.assign(**{c: pd.to_numeric(ok[c]) for c in numeric})
        .groupby(["batch_size", "num_workers"])[numeric]
        .mean()
    )
    measured = [cell for cell in position if cell in means.index]
    measured = [cell for cell in measured if means.loc[cell, [c for _, c in parts]].notna().any()]
    x = [position[cell] for cell in measured]
    bottoms = np.zeros(len(measured))
    handles = {}
    for label, column in parts:
        heights = np.array([means.loc[cell, column] for cell in measured], dtype=float)
        heights = np.nan_to_num(heights)  # infer has no backward or optimizer phase
        if not heights.any():
            continue
        bars = ax.bar(x, heights, bottom=bottoms, width=0.8, color=colors[label], label=label)
        handles[label] = bars
        bottoms += heights
    if STEP_TIME in means and measured:
        totals = [means.loc[cell, STEP_TIME] for cell in measured]
        handles["mean step time"] = ax.scatter(
            x,
            totals,
            marker="_",
            s=300,
            linewidths=2,
            color="black",
            zorder=5,
            label="mean step time",
        )
    if not measured:
        ax.text(0.5, 0.6, "no successful runs", ha="center", transform=ax.transAxes)
    for cell, where in position.items():
        if cell in measured:
            continue
        statuses = rows.loc[
            (rows["batch_size"] == cell[0]) & (rows["num_workers"] == cell[1]), "status"
        ]
        label = _failure_label(statuses) or "no breakdown"
        color = next((s["color"] for s in FAILED_STYLE.values() if s["label"] == label), "grey")
        ax.text(
            where,
            0.03,
            label,
            transform=ax.get_xaxis_transform(),
            rotation=90,
            ha="center",
            va="bottom",
            fontsize=8,
            fontweight="bold",
            color=color,
        )
    ax.set_xlim(min(position.values()) - 0.7, max(position.values()) + 0.7)
    ax.set_ylim(bottom=0)
    return handles


def read_maxbatch(paths: Sequence[str | Path]) -> dict[tuple[str, str], dict[str, Any]]:
    """Largest-batch search results by (mode, model): from the file's own ``mode``/``model``
    keys, else from its path (``.../<mode>/<model>.json``, the workflow's naming)."""
    found = {}
    for raw in paths:
        path = Path(raw)
        data = results.read_json(path)
        found[(data.get("mode") or path.parent.name, data.get("model") or path.stem)] = data
    return found


def all_figures(
    summary: pd.DataFrame,
    curves: pd.DataFrame,
    maxbatch: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> dict[str, Figure]:
    """Every figure of the report, by its PNG file name."""
    return {
        "throughput.png": throughput_figure(summary),
        "peak_memory.png": peak_memory_figure(summary, maxbatch),
        "data_wait.png": data_wait_figure(summary),
        "breakdown.png": breakdown_figure(summary),
        "loss_curves.png": loss_curves_figure(curves, summary),
        "val_accuracy.png": val_accuracy_figure(summary),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.report.plots", description="Draw the sweep's figures as PNGs."
    )
    parser.add_argument(
        "--summary", required=True, help="summary CSV from batchscope.report.aggregate"
    )
    parser.add_argument(
        "--curves", required=True, help="curves CSV from batchscope.report.aggregate"
    )
    parser.add_argument("--outdir", required=True, help="folder for the PNGs")
    parser.add_argument(
        "--maxbatch",
        nargs="*",
        default=[],
        metavar="FILE",
        help="largest-batch search results (bench.maxbatch) to mark on the memory figure",
    )
    args = parser.parse_args(argv)

    summary = pd.read_csv(args.summary)
    curves = pd.read_csv(args.curves)
    for name, fig in all_figures(summary, curves, read_maxbatch(args.maxbatch)).items():
        save_png(fig, Path(args.outdir) / name)
        plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
