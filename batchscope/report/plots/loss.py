"""The sweep's training-loss figure: loss vs samples seen, one line per batch size, one panel per
model (``loss_curves_figure``).

A batch size's line is the mean over its runs that did not diverge, with a band of one standard
deviation; warm-up steps are marked on it. Runs that diverged are drawn on their own and end in
the diverged mark; batch sizes without any steps (OOM, a failed job, a missing result) are
listed on the panel, so no failure is silently missing from it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from batchscope.core.results import GRID_KEYS
from batchscope.report.documents import sizes_text
from batchscope.report.figures import placeholder_figure, subplots
from batchscope.report.plots.panels import (
    FAILED_STYLE,
    NO_TRAIN_RUNS,
    PANEL_KEYS,
    failed_handle,
    palette,
    panel_title,
    select,
)
from batchscope.report.summary import result_files

#: Failures that leave a training run without steps, as the loss panel lists them.
NO_STEPS = {
    "oom": "OOM (no steps)",
    "failed": "failed (no result)",
    "missing": "missing (no result)",
}


def loss_curves_figure(curves: pd.DataFrame, summary: pd.DataFrame | None = None) -> Figure:
    """Training loss vs samples seen (warm-up and measured steps), one line per batch size, one
    panel per model.

    A batch size's line is the mean over its runs (workers, seeds) that did not diverge, with a
    band of one standard deviation; warm-up steps are on the line, marked by open circles. With
    ``summary``, each diverged run is drawn on its own and ends in a marker, and batch sizes
    without steps (OOM, a failed job, a missing result) are listed on the panel.
    """
    title = "Training loss"
    train, failed = _train_steps(curves, summary)
    keys = sorted(
        {tuple(k) for k in train[PANEL_KEYS].itertuples(index=False)}
        | {tuple(k) for k in failed[PANEL_KEYS].itertuples(index=False)}
    )
    if not keys:
        return placeholder_figure(NO_TRAIN_RUNS, title)
    colours = palette(pd.concat([train["batch_size"], failed["batch_size"]]))
    fig, axes = subplots(len(keys), width=5.4)
    for ax, key in zip(axes, keys, strict=True):
        rows = select(train, key)
        # a panel holds one accumulation_steps: its lines are the micro-batches, by their label
        rows = rows.assign(batch_size=rows["batch_size"].astype(int).astype(str))
        handles = _draw_loss_panel(ax, rows, select(failed, key), colours)
        ax.set_title(panel_title(key))
        ax.set_xlabel("samples seen (samples)")
        ax.set_ylabel("training loss")
        if handles:
            ax.legend(handles=handles, title="batch size", fontsize=8, title_fontsize=8)
    fig.suptitle(title)
    return fig


def _train_steps(
    curves: pd.DataFrame, summary: pd.DataFrame | None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The training steps with a finite loss, each with its run's status (ok without a
    ``summary``), and the summary's training runs that did not finish ok."""
    curves = result_files.with_grid_defaults(curves)
    summary = None if summary is None else result_files.with_grid_defaults(summary)
    train = curves[curves["mode"] == "train"] if not curves.empty else curves
    train = train.assign(loss=pd.to_numeric(train["loss"]).replace([np.inf, -np.inf], np.nan))
    train = train[train["loss"].notna()]
    failed = pd.DataFrame(columns=[*PANEL_KEYS, "batch_size", "status"])
    if summary is not None and not summary.empty:
        failed = summary[(summary["mode"] == "train") & (summary["status"] != "ok")]
        statuses = summary[[*GRID_KEYS, "status"]]
        train = train.drop(columns="status", errors="ignore").merge(statuses, how="left")
    train = train.assign(status=train.get("status", pd.Series(dtype=str)).fillna("ok"))
    return train, failed


def _draw_loss_panel(ax, rows: pd.DataFrame, fails: pd.DataFrame, colours) -> list:
    """Draw one model's loss curves and failure marks; returns legend handles."""
    handles = []
    hue_order = [b for b in colours if b in set(rows["batch_size"])]
    if rows.empty:
        ax.text(0.5, 0.6, "no training steps recorded", ha="center", transform=ax.transAxes)
    else:
        handles += [Line2D([], [], color=colours[b], label=b) for b in hue_order]
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
            hue="batch_size",
            hue_order=hue_order,
            palette=colours,
            estimator="mean",
            errorbar="sd",
            legend=False,
            ax=ax,
        )
    _mark_warmup(ax, rows, colours)
    _draw_diverged(ax, rows, colours)
    return handles + _failure_handles(ax, fails)


def _mark_warmup(ax, rows: pd.DataFrame, colours) -> None:
    """An open circle at each warm-up step's mean loss, per batch size."""
    warmup = rows[rows["phase"] == "warmup"].groupby(["batch_size", "samples_seen"], as_index=False)
    for _, point in warmup["loss"].mean().iterrows():
        ax.scatter(
            [point["samples_seen"]],
            [point["loss"]],
            marker="o",
            s=22,
            facecolors="none",
            edgecolors=[colours[point["batch_size"]]],
            zorder=4,
        )


def _draw_diverged(ax, rows: pd.DataFrame, colours) -> None:
    """Each diverged run's own line, ending in the diverged mark; one label per batch size."""
    style = FAILED_STYLE["diverged"]
    diverged = rows[rows["status"] == "diverged"].sort_values("samples_seen")
    labelled = set()
    for (batch, _, _), run in diverged.groupby(["batch_size", "num_workers", "seed"]):
        ax.plot(run["samples_seen"], run["loss"], color=colours[batch], linewidth=1, alpha=0.8)
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


def _failure_handles(ax, fails: pd.DataFrame) -> list[Line2D]:
    """Legend entries for the batch sizes that diverged, and for those without steps (NO_STEPS),
    which are also listed on the panel; returns the entries."""
    handles = []
    diverged_sizes = sorted(
        {int(b) for b in fails.loc[fails["status"] == "diverged", "batch_size"]}
    )
    if diverged_sizes:
        handles.append(failed_handle("diverged", "diverged: " + sizes_text(diverged_sizes)))
    level = 0
    for status, text in NO_STEPS.items():
        sizes = sorted({int(b) for b in fails.loc[fails["status"] == status, "batch_size"]})
        if not sizes:
            continue
        ax.text(
            0.02,
            0.04 + 0.07 * level,
            f"{text}: batch size {sizes_text(sizes)}",
            transform=ax.transAxes,
            color=FAILED_STYLE[status]["color"],
            fontsize=9,
            fontweight="bold",
        )
        label = f"{FAILED_STYLE[status]['label']}: {sizes_text(sizes)}"
        handles.append(failed_handle(status, label))
        level += 1
    return handles
