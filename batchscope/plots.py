"""Figures of a sweep, from the summary and curves CSVs that ``batchscope.aggregate`` writes.

Each ``*_figure`` function takes DataFrames and returns a matplotlib Figure; ``main`` writes them
all as PNGs with fixed names. Failed grid points are drawn, not dropped: OOM is a red "x" and
diverged an orange triangle at the bottom of the axis, each labelled; heatmap cells say "OOM" or
"diverged". A figure with nothing to show says so in words instead of failing.

Command line::

    python -m batchscope.plots --summary results/summary.csv --curves results/curves.csv \\
        --outdir results/plots
"""

from __future__ import annotations

import argparse
import io
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: figures are files, never windows

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402

from batchscope import results  # noqa: E402
from batchscope.results import GRID_KEYS  # noqa: E402

#: A panel shows one mode x model (x dataset, which is a single one per model in a usual sweep).
PANEL_KEYS = ["mode", "model", "dataset"]

#: How a failed grid point is drawn; ``label`` is the text shown on the axis and in the legend.
FAILED_STYLE = {
    "oom": {"label": "OOM", "marker": "x", "color": "red"},
    "diverged": {"label": "diverged", "marker": "v", "color": "darkorange"},
}

DPI = 110

NO_RUNS = "no runs in this sweep"
NO_TRAIN_RUNS = "no training runs in this sweep"


def _panel_title(key: Sequence) -> str:
    mode, model, dataset = key
    return f"{mode} / {model} ({dataset})"


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


def _subplots(count: int, width: float = 5.0, height: float = 3.8) -> tuple[Figure, list]:
    """A grid of ``count`` axes (at most three per row); spare axes are hidden."""
    ncols = min(count, 3)
    nrows = math.ceil(count / ncols)
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(
            nrows,
            ncols,
            figsize=(width * ncols, height * nrows),
            squeeze=False,
            layout="constrained",
        )
    flat = list(axes.flat)
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


def placeholder_figure(message: str, title: str = "") -> Figure:
    """A small figure that only says ``message``: for a plot this sweep has no data for."""
    fig, ax = plt.subplots(figsize=(6, 2.5))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=13, transform=ax.transAxes)
    if title:
        fig.suptitle(title)
    return fig


def _log2_batch_axis(ax, batch_sizes) -> None:
    """Log2 x axis whose ticks are exactly the batch sizes measured (7 or 50 included)."""
    sizes = sorted({int(b) for b in batch_sizes})
    ax.set_xscale("log", base=2)
    ax.set_xlim(sizes[0] / 1.4, sizes[-1] * 1.4)
    ax.set_xticks(sizes, [str(s) for s in sizes], rotation=45 if len(sizes) > 8 else 0)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("batch size (samples)")


def _mark_failed(ax, rows: pd.DataFrame) -> list[Line2D]:
    """Draw failed grid points at the bottom of ``ax``, labelled; returns legend handles.

    Positions are in data units along x and axes units along y, so the marks stay on screen
    whatever the y range, and do not need a y value (a failed run may have none).
    """
    handles = []
    bottom = ax.get_xaxis_transform()
    for level, (status, style) in enumerate(FAILED_STYLE.items()):
        sizes = sorted({int(b) for b in rows.loc[rows["status"] == status, "batch_size"]})
        if not sizes:
            continue
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


def _metric_figure(
    summary: pd.DataFrame, y: str, ylabel: str, title: str, empty_message: str
) -> Figure:
    """``y`` vs batch size, one line per num_workers, one panel per mode x model.

    With several seeds per point the line is the mean and the bars the standard deviation.
    """
    panels = _panels(summary, PANEL_KEYS)
    if not panels:
        return placeholder_figure(empty_message, title)
    palette = _palette(summary["num_workers"])
    several_seeds = summary.groupby(["batch_size", "num_workers", *PANEL_KEYS]).size().max() > 1
    fig, axes = _subplots(len(panels))
    for ax, (key, rows) in zip(axes, panels, strict=True):
        ok = rows[(rows["status"] == "ok") & rows[y].notna()].assign(
            workers=lambda d: d["num_workers"].astype(int).astype(str)
        )
        handles = []
        if ok.empty:
            ax.text(0.5, 0.6, "no successful runs", ha="center", transform=ax.transAxes)
        else:
            hue_order = [w for w in palette if w in set(ok["workers"])]
            sns.lineplot(
                data=ok,
                x="batch_size",
                y=y,
                hue="workers",
                hue_order=hue_order,
                palette=palette,
                marker="o",
                estimator="mean",
                errorbar="sd" if several_seeds else None,
                err_style="bars",
                legend=False,
                ax=ax,
            )
            handles = [Line2D([], [], color=palette[w], marker="o", label=w) for w in hue_order]
        ax.set_ylim(bottom=0)
        _log2_batch_axis(ax, rows["batch_size"])
        handles += _mark_failed(ax, rows)
        ax.set_ylabel(ylabel)
        ax.set_title(_panel_title(key))
        if handles:
            ax.legend(handles=handles, title="num_workers", fontsize=8, title_fontsize=8)
    fig.suptitle(title + (" (mean ± sd over seeds)" if several_seeds else ""))
    return fig


def throughput_figure(summary: pd.DataFrame) -> Figure:
    """Samples per second vs batch size, hue = num_workers, a panel per mode x model."""
    return _metric_figure(summary, "samples_per_s", "throughput (samples/s)", "Throughput", NO_RUNS)


def peak_memory_figure(summary: pd.DataFrame) -> Figure:
    """Peak memory (MB) vs batch size, hue = num_workers, a panel per mode x model."""
    return _metric_figure(summary, "peak_mem_mb", "peak memory (MB)", "Peak memory", NO_RUNS)


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


def _heatmap_cells(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mean data_wait_frac of ok runs per (batch_size, num_workers), and a failure label per cell
    ("OOM"/"diverged", empty where some run was ok or the point was not in the sweep)."""
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
            statuses = set(cell["status"])
            status = "oom" if "oom" in statuses else "diverged" if "diverged" in statuses else ""
            labels.loc[batch, workers] = FAILED_STYLE[status]["label"] if status else ""
    return values, labels


def data_wait_figure(summary: pd.DataFrame) -> Figure:
    """Heatmap of the share of step time spent waiting for data: batch size x num_workers,
    one panel per mode x model, each cell annotated."""
    title = "Data wait"
    panels = _panels(summary, PANEL_KEYS)
    if not panels:
        return placeholder_figure(NO_RUNS, title)
    fig, axes = _subplots(len(panels), width=5.2, height=4.2)
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
    ``summary``, each diverged run is drawn on its own and ends in a marker, and batch sizes that
    hit OOM (no steps at all) are listed on the panel.
    """
    title = "Training loss"
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
    fig, axes = _subplots(len(keys), width=5.4)
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
    oom = sorted({int(b) for b in fails.loc[fails["status"] == "oom", "batch_size"]})
    if oom:
        ax.text(
            0.02,
            0.04,
            "OOM (no steps): batch size " + _sizes(oom),
            transform=ax.transAxes,
            color=FAILED_STYLE["oom"]["color"],
            fontsize=9,
            fontweight="bold",
        )
        handles.append(_failed_handle("oom", "OOM: " + _sizes(oom)))
    return handles


def _sizes(sizes) -> str:
    return ", ".join(str(s) for s in sizes)


def all_figures(summary: pd.DataFrame, curves: pd.DataFrame) -> dict[str, Figure]:
    """Every figure of the report, by its PNG file name."""
    return {
        "throughput.png": throughput_figure(summary),
        "peak_memory.png": peak_memory_figure(summary),
        "data_wait.png": data_wait_figure(summary),
        "loss_curves.png": loss_curves_figure(curves, summary),
        "val_accuracy.png": val_accuracy_figure(summary),
    }


def save_png(fig: Figure, path: str | Path, dpi: int = DPI) -> None:
    """Write ``fig`` as PNG atomically."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    results.write_bytes(path, buffer.getvalue())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.plots", description="Draw the sweep's figures as PNGs."
    )
    parser.add_argument("--summary", required=True, help="summary CSV from batchscope.aggregate")
    parser.add_argument("--curves", required=True, help="curves CSV from batchscope.aggregate")
    parser.add_argument("--outdir", required=True, help="folder for the PNGs")
    args = parser.parse_args(argv)

    summary = pd.read_csv(args.summary)
    curves = pd.read_csv(args.curves)
    for name, fig in all_figures(summary, curves).items():
        save_png(fig, Path(args.outdir) / name)
        plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
