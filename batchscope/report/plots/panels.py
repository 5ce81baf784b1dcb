"""What every figure of the sweep (``batchscope.report.plots.build``) shares: one panel per mode x
model, its title, the batch-size axis of the sizes measured, the worker-count colours, and how
failed grid points are marked.

Failed grid points are drawn, not dropped: OOM is a red "x", diverged an orange triangle, a job
that failed a black "X" and a result that is missing a grey square, at the bottom of the axis,
each labelled (``FAILED_STYLE``, ``mark_failed``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from batchscope.report.figures import batch_axis

#: A panel shows one mode x model (x dataset, which is a single one per model in a usual sweep).
#: One panel per distinct value of these; a sweep with several ``accumulation_steps`` (a
#: training axis) gets a panel per value, so micro-batch sizes stay on one x axis; so does each
#: sequence length of token data (empty for images) and each devices value.
PANEL_KEYS = ["mode", "model", "dataset", "sequence_length", "accumulation_steps", "devices"]

#: How a failed grid point is drawn; ``label`` is the text shown on the axis and in the legend.
FAILED_STYLE = {
    "oom": {"label": "OOM", "marker": "x", "color": "red"},
    "diverged": {"label": "diverged", "marker": "v", "color": "darkorange"},
    "failed": {"label": "failed", "marker": "X", "color": "black"},
    "missing": {"label": "missing", "marker": "s", "color": "grey"},
}

NO_RUNS = "no runs in this sweep"
NO_TRAIN_RUNS = "no training runs in this sweep"


def panel_title(key: Sequence) -> str:
    """The title of the panel of one PANEL_KEYS value."""
    mode, model, dataset, sequence_length, accumulation, devices = key
    title = f"{mode} / {model} ({dataset})"
    if not pd.isna(sequence_length):
        title += f", sequences of {int(sequence_length)}"
    if devices != 1:
        title += f" on {int(devices)} devices (batch size per device)"
    if accumulation != 1:
        steps = int(accumulation)
        title += f"\n{steps} accumulation steps (effective batch = batch size x {steps})"
    return title


def panels(frame: pd.DataFrame, keys: list[str]) -> list[tuple[tuple, pd.DataFrame]]:
    """Sub-frames per distinct ``keys`` value, in sorted order."""
    if frame.empty:
        return []
    return [(k, sub) for k, sub in frame.groupby(keys, sort=True, dropna=False)]


def select(frame: pd.DataFrame, key: Sequence) -> pd.DataFrame:
    """Rows of ``frame`` whose PANEL_KEYS equal ``key``."""
    mask = pd.Series(True, index=frame.index)
    for column, value in zip(PANEL_KEYS, key, strict=True):
        if pd.isna(value):  # an image sweep's empty sequence length
            mask &= frame[column].isna()
        else:
            mask &= (frame[column] == value).fillna(False).astype(bool)
    return frame[mask]


def log2_batch_axis(ax, batch_sizes, extra=(), span=()) -> None:
    """Log2 x axis whose ticks are exactly the batch sizes measured (7 or 50 included) and the
    ``extra`` sizes (a search's limit, say); ``span`` widens the axis to more sizes, unlabelled."""
    sizes = sorted({int(b) for b in batch_sizes} | {int(b) for b in extra})
    ends = sorted({*sizes, *(int(b) for b in span)})
    rotation = 45 if len(sizes) > 8 else 0
    batch_axis(ax, sizes, ends[0] / 1.4, ends[-1] * 1.4, "batch size (samples)", rotation=rotation)


def palette(values) -> dict[str, tuple]:
    """One colour per distinct value (as its string label), in numeric order."""
    ordered = [str(v) for v in sorted({int(v) for v in values})]
    return dict(zip(ordered, sns.color_palette("colorblind", len(ordered)), strict=True))


def mark_failed(ax, rows: pd.DataFrame) -> list[Line2D]:
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
        handles.append(failed_handle(status))
    return handles


def failed_handle(status: str, label: str | None = None) -> Line2D:
    """A legend entry in the failure's style, labelled ``label`` (default: the style's)."""
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


def failure_label(statuses) -> str:
    """The label of the first failure status (in FAILED_STYLE order) among ``statuses``."""
    for status, style in FAILED_STYLE.items():
        if status in set(statuses):
            return style["label"]
    return ""
