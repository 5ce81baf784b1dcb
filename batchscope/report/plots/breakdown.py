"""The sweep's figures of where the step time goes, one panel per mode x model.

- ``data_wait_figure``: a heatmap of the share of step time spent waiting for data, batch size x
  DataLoader worker count; a cell without an ok run says why ("OOM", "diverged", "failed",
  "missing").
- ``breakdown_figure``: stacked bars of the mean step time split into its phases
  (``BREAKDOWN_PARTS``), per batch size and worker count; a failed point is labelled in place of
  its bar.

Both are means over the runs that ran ok (the breakdown: over those that timed it, a throughput
run's first round of each seed).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from batchscope.report.figures import placeholder_figure, subplots
from batchscope.report.plots.panels import (
    FAILED_STYLE,
    NO_RUNS,
    PANEL_KEYS,
    failure_label,
    panel_title,
    panels,
)
from batchscope.report.summary import result_files

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

#: Each part's colour, by its index in seaborn's "colorblind" palette: no two alike (the palette
#: in order gave data wait and forward two near-identical oranges), data wait the orange.
BREAKDOWN_COLOURS = {
    "runner": 7,  # grey
    "data wait": 1,  # orange
    "host-to-device copy": 8,  # yellow
    "forward": 0,  # blue
    "backward": 4,  # pink
    "optimizer": 2,  # green
    "other": 5,  # brown
}

NO_BREAKDOWN = "no step-time breakdown in these results"


# --------------------------------------------------------------------------------------------
# Data wait
# --------------------------------------------------------------------------------------------


def data_wait_figure(summary: pd.DataFrame) -> Figure:
    """Heatmap of the share of step time spent waiting for data: batch size x num_workers,
    one panel per mode x model, each cell annotated."""
    title = "Data wait"
    summary = result_files.with_grid_defaults(summary)
    grouped = panels(summary, PANEL_KEYS)
    if not grouped:
        return placeholder_figure(NO_RUNS, title)
    fig, axes = subplots(len(grouped), width=5.2, height=4.2)
    for ax, (key, rows) in zip(axes, grouped, strict=True):
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
        _label_cells(ax, labels)
        ax.set_xlabel("num_workers")
        ax.set_ylabel("batch size (samples)")
        ax.set_title(panel_title(key))
    fig.suptitle(title + " (mean over seeds of ok runs)")
    return fig


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
            labels.loc[batch, workers] = failure_label(cell["status"])
    return values, labels


def _label_cells(ax, labels: pd.DataFrame) -> None:
    """Write each heatmap cell's failure label over it, in bold red."""
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


# --------------------------------------------------------------------------------------------
# Step time breakdown
# --------------------------------------------------------------------------------------------


def breakdown_figure(summary: pd.DataFrame) -> Figure:
    """Stacked bars of the mean step time (ms) per batch size and worker count, split into the
    runner's bookkeeping, data wait, host-to-device copy, forward, backward, optimizer and the
    rest; one panel per mode x model. A bar is the mean over the point's ok runs that timed
    the breakdown (a throughput run's diagnostic steps: round 1 of each seed), its parts beside
    those runs' mean step time (a black dash); failed points are labelled."""
    title = "Step time breakdown"
    columns = [column for _, column in BREAKDOWN_PARTS if column in summary]
    summary = result_files.with_grid_defaults(summary)
    grouped = panels(summary, PANEL_KEYS)
    if not grouped:
        return placeholder_figure(NO_RUNS, title)
    ok = summary[summary["status"] == "ok"]
    if not columns or ok[columns].apply(pd.to_numeric).isna().all(axis=None):
        return placeholder_figure(NO_BREAKDOWN, title)
    palette = sns.color_palette("colorblind")
    colors = {label: palette[BREAKDOWN_COLOURS[label]] for label, _ in BREAKDOWN_PARTS}
    fig, axes = subplots(len(grouped), width=5.6, height=4.2)
    handles: dict[str, Any] = {}
    for ax, (key, rows) in zip(axes, grouped, strict=True):
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
        ax.set_title(panel_title(key))
    if handles:  # one legend for every panel, beside them, in stacking order (top first)
        order = [label for label, _ in reversed(BREAKDOWN_PARTS)] + ["mean step time"]
        labels = [label for label in order if label in handles]
        fig.legend([handles[label] for label in labels], labels, loc="outside right upper")
    fig.suptitle(title + " (mean over seeds of ok runs)")
    return fig


def _breakdown_positions(cells: list[tuple[int, int]]) -> list[float]:
    """x positions of (batch_size, num_workers) cells: worker counts side by side, a gap between
    batch sizes."""
    workers = sorted({w for _, w in cells})
    sizes = sorted({b for b, _ in cells})
    return [sizes.index(b) * (len(workers) + 1) + workers.index(w) for b, w in cells]


def _draw_breakdown(ax, rows: pd.DataFrame, position: dict, colors: dict) -> dict[str, Any]:
    """One panel of ``breakdown_figure``: the stacks, the step-time dashes, the failure labels.
    Returns legend handles by label."""
    parts = [(label, c) for label, c in BREAKDOWN_PARTS if c in rows]
    numeric = [c for _, c in parts] + ([STEP_TIME] if STEP_TIME in rows else [])
    ok = rows[rows["status"] == "ok"]
    # the runs that timed a breakdown (round 1 of each seed): their step time beside their parts
    ok = ok[ok[[c for _, c in parts]].apply(pd.to_numeric).notna().any(axis=1)]
    means = (
        ok.assign(**{c: pd.to_numeric(ok[c]) for c in numeric})
        .groupby(["batch_size", "num_workers"])[numeric]
        .mean()
    )
    measured = [cell for cell in position if cell in means.index]
    measured = [cell for cell in measured if means.loc[cell, [c for _, c in parts]].notna().any()]
    x = [position[cell] for cell in measured]
    handles = _draw_stacks(ax, means, measured, x, parts, colors)
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
    _label_unmeasured(ax, rows, position, measured)
    ax.set_xlim(min(position.values()) - 0.7, max(position.values()) + 0.7)
    ax.set_ylim(bottom=0)
    return handles


def _draw_stacks(
    ax, means: pd.DataFrame, measured: list, x: list, parts: list, colors: dict
) -> dict[str, Any]:
    """The measured cells' phases as stacked bars, bottom to top; returns the bars by label
    (a phase no cell spent time in gets none)."""
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
    return handles


def _label_unmeasured(ax, rows: pd.DataFrame, position: dict, measured: list) -> None:
    """Say, where a cell has no bar, why: its failure's label in its colour, or "no breakdown"."""
    for cell, where in position.items():
        if cell in measured:
            continue
        statuses = rows.loc[
            (rows["batch_size"] == cell[0]) & (rows["num_workers"] == cell[1]), "status"
        ]
        label = failure_label(statuses) or "no breakdown"
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
