"""Energy per sample against throughput: one panel per mode × model, one point per run that
measured energy (``energy_source`` ``nvml`` or ``rapl``), coloured by batch size, marked by
worker count. Down and to the right is better on both counts; the points on the lower-right
edge are the trade-offs worth having.

``energy_figure`` returns None when no run measured energy: the recommendation then says why
in words (``batchscope.report.recommend.objectives``) instead of drawing an empty figure.
"""

from __future__ import annotations

import base64
import io

import pandas as pd
from matplotlib.figure import Figure

from batchscope.report import figures

#: Marker per worker count, in the order the counts sort.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def measured_runs(summary: pd.DataFrame) -> pd.DataFrame:
    """The ok runs with an energy per sample and a throughput."""
    if "energy_j_per_sample" not in summary:
        return summary.iloc[:0]
    energy = pd.to_numeric(summary["energy_j_per_sample"], errors="coerce")
    speed = pd.to_numeric(summary["samples_per_s"], errors="coerce")
    keep = (summary["status"] == "ok") & energy.notna() & speed.notna()
    return summary[keep].assign(energy_j_per_sample=energy[keep], samples_per_s=speed[keep])


def energy_figure(summary: pd.DataFrame) -> Figure | None:
    """The figure, or None when no run measured energy."""
    runs = measured_runs(summary)
    if runs.empty:
        return None
    groups = list(runs.groupby(["mode", "model"], sort=True))
    fig, axes = figures.subplots(len(groups))
    sizes = sorted(runs["batch_size"].unique())
    palette = dict(zip(sizes, figures.sns.color_palette("viridis", len(sizes)), strict=True))
    workers = sorted(runs["num_workers"].unique())
    marker = {w: MARKERS[i % len(MARKERS)] for i, w in enumerate(workers)}
    for ax, ((mode, model), group) in zip(axes, groups, strict=True):
        for (batch, nw), point in group.groupby(["batch_size", "num_workers"], sort=True):
            ax.scatter(
                point["samples_per_s"],
                point["energy_j_per_sample"],
                color=palette[batch],
                marker=marker[nw],
                label=f"bs={batch}, nw={nw}",
            )
        ax.set_title(f"{mode} / {model}")
        ax.set_xlabel("samples/s")
        ax.set_ylabel("energy per sample (J)")
        ax.legend(fontsize=7)
    sources = ", ".join(sorted(runs["energy_source"].astype(str).unique()))
    fig.suptitle(f"Energy per sample vs throughput ({sources})")
    return fig


def png_data_uri(fig: Figure) -> str:
    """``fig`` as a PNG ``data:`` URI, for a standalone HTML page."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=figures.DPI)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
