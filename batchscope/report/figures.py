"""What every figure of the reports shares: the grid of panels, the figure that only says why
there is nothing to draw, the log2 batch-size axis and writing a PNG.

Both the sweep's figures (``batchscope.report.plots.build``) and the convergence report's
(``batchscope.report.convergence.build``) draw with these, so a panel grid, an empty figure or
a batch axis looks the same in both. Importing this module selects matplotlib's file-only Agg
backend: figures are files, never windows.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: figures are files, never windows

import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402

from batchscope.core import results  # noqa: E402

#: Resolution of every PNG the reports write.
DPI = 110


def subplots(
    count: int, width: float = 5.0, height: float = 3.8, max_cols: int = 3
) -> tuple[Figure, list]:
    """A grid of ``count`` axes (at most ``max_cols`` per row), each ``width`` x ``height``
    inches, on seaborn's white grid; spare axes are hidden."""
    ncols = min(count, max_cols)
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


def placeholder_figure(
    message: str, title: str = "", *, width: float = 6.0, fontsize: float = 13, wrap: bool = False
) -> Figure:
    """A small figure (``width`` x 2.5 inches) that only says ``message``: for a plot the sweep
    has no data for. ``wrap`` breaks a long message at the figure's edge."""
    fig, ax = plt.subplots(figsize=(width, 2.5))
    ax.axis("off")
    ax.text(
        0.5,
        0.5,
        message,
        ha="center",
        va="center",
        fontsize=fontsize,
        transform=ax.transAxes,
        wrap=wrap,
    )
    if title:
        fig.suptitle(title)
    return fig


def batch_axis(
    ax, sizes: Iterable[int], lo: float, hi: float, label: str, *, rotation: float = 0
) -> None:
    """A log2 x axis from ``lo`` to ``hi`` whose ticks are exactly ``sizes`` (7 or 50 included,
    no minor ticks), labelled ``label``; ``rotation`` turns the tick labels."""
    sizes = list(sizes)
    ax.set_xscale("log", base=2)
    ax.set_xlim(lo, hi)
    ax.set_xticks(sizes, [str(int(s)) for s in sizes], rotation=rotation)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(label)


def save_png(fig: Figure, path: str | Path, dpi: int = DPI) -> None:
    """Write ``fig`` as PNG atomically."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    results.write_bytes(path, buffer.getvalue())
